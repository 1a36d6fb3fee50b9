//! A data-only pickle reader (protocols 0 to 5, the opcodes `pickle` and `torch.save` write).
//!
//! Nothing is ever imported or called: `GLOBAL`/`STACK_GLOBAL` become [`Value::Global`], `REDUCE`,
//! `NEWOBJ` and `OBJ` become inert [`Value::Call`]s, `BUILD` a [`Value::Build`], persistent ids a
//! [`Value::PersId`]. The one exception is `collections.OrderedDict()`, which is read as a plain
//! dict so `SETITEMS` on it works. Containers live in an arena, so memo references share them as
//! Python's would; the final tree is bounded in depth and size (a pickle cannot blow up memory).

use crate::SnapshotError;

/// A pickled value, inert.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer too large for i64 (little-endian two's complement bytes).
    BigInt(Vec<u8>),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Set(Vec<Value>),
    /// `module.name`, never imported.
    Global(String),
    /// `callee(*args)`, never called.
    Call(Box<Value>, Vec<Value>),
    /// `obj.__setstate__(state)`, never called.
    Build(Box<Value>, Box<Value>),
    PersId(Box<Value>),
}

impl Value {
    /// The value for a string key of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v),
            Value::Build(obj, _) => obj.get(key),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    /// The items of a list or tuple.
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) | Value::Set(v) => Some(v),
            _ => None,
        }
    }
}

/// How deep and how large the decoded tree may get: values, and bytes of text and data in them
/// (a memo reference repeats a string without repeating its bytes in the file).
const MAX_DEPTH: usize = 200;
const MAX_NODES: usize = 5_000_000;
const MAX_BYTES: usize = 64 << 20;

/// What is left of the tree's size bounds while it is built.
struct Budget {
    nodes: usize,
    bytes: usize,
}

#[derive(Debug, Clone)]
enum Node {
    Leaf(Value),
    List(Vec<usize>),
    Tuple(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Set(Vec<usize>),
    Call(usize, usize),
    Build(usize, usize),
    PersId(usize),
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Mark,
    Obj(usize),
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    arena: Vec<Node>,
    stack: Vec<Slot>,
    memo: std::collections::HashMap<u64, usize>,
}

fn err(msg: impl Into<String>) -> SnapshotError {
    SnapshotError::Pickle(msg.into())
}

/// Reads one pickle from the start of `data`.
pub fn parse(data: &[u8]) -> Result<Value, SnapshotError> {
    let mut m = Machine { data, pos: 0, arena: Vec::new(), stack: Vec::new(), memo: Default::default() };
    let top = m.run()?;
    let mut budget = Budget { nodes: MAX_NODES, bytes: MAX_BYTES };
    m.tree(top, 0, &mut budget)
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.data.len());
        let end = end.ok_or_else(|| err(format!("truncated at byte {} (wanted {n} more bytes)", self.pos)))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take(1)?[0])
    }
    fn le(&mut self, n: usize) -> Result<u64, SnapshotError> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |acc, x| (acc << 8) | u64::from(*x)))
    }
    fn len(&mut self, n: usize) -> Result<usize, SnapshotError> {
        let v = self.le(n)?;
        usize::try_from(v).ok().filter(|l| *l <= self.data.len()).ok_or_else(|| err(format!("length {v} beyond the data")))
    }
    fn line(&mut self) -> Result<&'a str, SnapshotError> {
        let rest = &self.data[self.pos..];
        let nl = rest.iter().position(|b| *b == b'\n').ok_or_else(|| err("truncated text argument"))?;
        self.pos += nl + 1;
        std::str::from_utf8(&rest[..nl]).map_err(|_| err("text argument is not UTF-8"))
    }
    fn push(&mut self, n: Node) {
        self.arena.push(n);
        self.stack.push(Slot::Obj(self.arena.len() - 1));
    }
    fn leaf(&mut self, v: Value) {
        self.push(Node::Leaf(v));
    }
    fn pop(&mut self) -> Result<usize, SnapshotError> {
        match self.stack.pop() {
            Some(Slot::Obj(i)) => Ok(i),
            Some(Slot::Mark) => Err(err("unexpected mark")),
            None => Err(err("stack underflow")),
        }
    }
    fn top(&self) -> Result<usize, SnapshotError> {
        match self.stack.last() {
            Some(Slot::Obj(i)) => Ok(*i),
            _ => Err(err("stack underflow")),
        }
    }
    fn pop_mark(&mut self) -> Result<Vec<usize>, SnapshotError> {
        let at = self.stack.iter().rposition(|s| matches!(s, Slot::Mark)).ok_or_else(|| err("no mark on the stack"))?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        items
            .into_iter()
            .map(|s| match s {
                Slot::Obj(i) => Ok(i),
                Slot::Mark => Err(err("nested mark")),
            })
            .collect()
    }
    fn str_of(&self, i: usize) -> Option<&str> {
        match &self.arena[i] {
            Node::Leaf(Value::Str(s)) => Some(s),
            _ => None,
        }
    }
    fn global(&mut self, module: &str, name: &str) {
        self.leaf(Value::Global(format!("{module}.{name}")));
    }
    fn set_items(&mut self, target: usize, items: Vec<usize>) -> Result<(), SnapshotError> {
        if items.len() & 1 == 1 {
            return Err(err("odd number of dict items"));
        }
        let pairs: Vec<(usize, usize)> = items.chunks(2).map(|c| (c[0], c[1])).collect();
        match &mut self.arena[target] {
            Node::Dict(d) => d.extend(pairs),
            // An object's __setitem__: keep the pairs on an inert dict beside it.
            other => *other = Node::Dict(pairs),
        }
        Ok(())
    }
    fn append(&mut self, target: usize, items: Vec<usize>) -> Result<(), SnapshotError> {
        match &mut self.arena[target] {
            Node::List(l) | Node::Set(l) => l.extend(items),
            _ => return Err(err("append to something that is not a list")),
        }
        Ok(())
    }
    fn memo_put(&mut self, key: u64) -> Result<(), SnapshotError> {
        let top = self.top()?;
        self.memo.insert(key, top);
        Ok(())
    }
    fn memo_get(&mut self, key: u64) -> Result<(), SnapshotError> {
        let i = *self.memo.get(&key).ok_or_else(|| err(format!("memo key {key} never stored")))?;
        self.stack.push(Slot::Obj(i));
        Ok(())
    }

    fn run(&mut self) -> Result<usize, SnapshotError> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let v = self.u8()?;
                    if v > 5 {
                        return Err(err(format!("unsupported pickle protocol {v}")));
                    }
                }
                0x95 => {
                    self.take(8)?;
                } // FRAME
                b'.' => return self.pop(),
                b'(' => self.stack.push(Slot::Mark),
                b'0' => {
                    self.stack.pop().ok_or_else(|| err("stack underflow"))?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let t = self.top()?;
                    self.stack.push(Slot::Obj(t));
                }
                b'N' => self.leaf(Value::None),
                0x88 => self.leaf(Value::Bool(true)),
                0x89 => self.leaf(Value::Bool(false)),
                b'I' => {
                    let s = self.line()?.trim();
                    let v = match s {
                        "00" => Value::Bool(false),
                        "01" => Value::Bool(true),
                        _ => Value::Int(s.parse().map_err(|_| err(format!("bad INT {s:?}")))?),
                    };
                    self.leaf(v);
                }
                b'J' => {
                    let v = self.le(4)? as u32 as i32;
                    self.leaf(Value::Int(i64::from(v)));
                }
                b'K' => {
                    let v = self.le(1)?;
                    self.leaf(Value::Int(v as i64));
                }
                b'M' => {
                    let v = self.le(2)?;
                    self.leaf(Value::Int(v as i64));
                }
                b'L' => {
                    let s = self.line()?.trim().trim_end_matches('L');
                    let v = s.parse::<i64>().map(Value::Int).unwrap_or_else(|_| Value::BigInt(s.as_bytes().to_vec()));
                    self.leaf(v);
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a { self.len(1)? } else { self.len(4)? };
                    let b = self.take(n)?;
                    self.leaf(long_value(b));
                }
                b'F' => {
                    let s = self.line()?.trim();
                    self.leaf(Value::Float(s.parse().map_err(|_| err(format!("bad FLOAT {s:?}")))?));
                }
                b'G' => {
                    let b = self.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.leaf(Value::Float(f64::from_be_bytes(a)));
                }
                b'S' => {
                    let s = self.line()?.trim();
                    self.leaf(Value::Str(s.trim_matches(|c| c == '\'' || c == '"').to_string()));
                }
                b'V' => {
                    let s = self.line()?;
                    self.leaf(Value::Str(s.to_string()));
                }
                b'T' | b'U' | 0x8c | b'X' | 0x8d => {
                    let n = match op {
                        b'U' | 0x8c => self.len(1)?,
                        b'T' | b'X' => self.len(4)?,
                        _ => self.len(8)?,
                    };
                    let b = self.take(n)?;
                    let s = if matches!(op, b'T' | b'U') {
                        String::from_utf8_lossy(b).into_owned()
                    } else {
                        std::str::from_utf8(b).map_err(|_| err("unicode string is not UTF-8"))?.to_string()
                    };
                    self.leaf(Value::Str(s));
                }
                b'B' | b'C' | 0x8e | 0x96 => {
                    let n = match op {
                        b'C' => self.len(1)?,
                        b'B' => self.len(4)?,
                        _ => self.len(8)?,
                    };
                    let b = self.take(n)?.to_vec();
                    self.leaf(Value::Bytes(b));
                }
                b']' => self.push(Node::List(Vec::new())),
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Node::List(items));
                }
                b'a' => {
                    let v = self.pop()?;
                    let t = self.top()?;
                    self.append(t, vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let t = self.top()?;
                    self.append(t, items)?;
                }
                b')' => self.push(Node::Tuple(Vec::new())),
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Tuple(items));
                }
                0x85 => {
                    let a = self.pop()?;
                    self.push(Node::Tuple(vec![a]));
                }
                0x86 => {
                    let b = self.pop()?;
                    let a = self.pop()?;
                    self.push(Node::Tuple(vec![a, b]));
                }
                0x87 => {
                    let c = self.pop()?;
                    let b = self.pop()?;
                    let a = self.pop()?;
                    self.push(Node::Tuple(vec![a, b, c]));
                }
                b'}' => self.push(Node::Dict(Vec::new())),
                b'd' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Dict(Vec::new()));
                    let t = self.top()?;
                    self.set_items(t, items)?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let t = self.top()?;
                    self.set_items(t, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let t = self.top()?;
                    self.set_items(t, items)?;
                }
                0x8f => self.push(Node::Set(Vec::new())),
                0x90 => {
                    let items = self.pop_mark()?;
                    let t = self.top()?;
                    self.append(t, items)?;
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Node::Set(items));
                }
                b'g' => {
                    let k = self.line()?.trim().parse().map_err(|_| err("bad GET key"))?;
                    self.memo_get(k)?;
                }
                b'h' => {
                    let k = self.le(1)?;
                    self.memo_get(k)?;
                }
                b'j' => {
                    let k = self.le(4)?;
                    self.memo_get(k)?;
                }
                b'p' => {
                    let k = self.line()?.trim().parse().map_err(|_| err("bad PUT key"))?;
                    self.memo_put(k)?;
                }
                b'q' => {
                    let k = self.le(1)?;
                    self.memo_put(k)?;
                }
                b'r' => {
                    let k = self.le(4)?;
                    self.memo_put(k)?;
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    self.memo_put(k)?;
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.global(module, name);
                }
                0x93 => {
                    let (n, m) = (self.pop()?, self.pop()?);
                    let (Some(m), Some(n)) = (self.str_of(m).map(str::to_string), self.str_of(n).map(str::to_string)) else {
                        return Err(err("STACK_GLOBAL needs two strings"));
                    };
                    self.global(&m, &n);
                }
                b'R' | 0x81 => {
                    let (args, callee) = (self.pop()?, self.pop()?);
                    let ordered = matches!(&self.arena[callee], Node::Leaf(Value::Global(g)) if g == "collections.OrderedDict");
                    self.push(if ordered { Node::Dict(Vec::new()) } else { Node::Call(callee, args) });
                }
                0x92 => {
                    let _kwargs = self.pop()?;
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    self.push(Node::Call(cls, args));
                }
                b'i' => {
                    let (module, name) = (self.line()?, self.line()?);
                    let items = self.pop_mark()?;
                    self.global(module, name);
                    let g = self.pop()?;
                    self.push(Node::Tuple(items));
                    let t = self.pop()?;
                    self.push(Node::Call(g, t));
                }
                b'o' => {
                    let mut items = self.pop_mark()?;
                    if items.is_empty() {
                        return Err(err("OBJ without a class"));
                    }
                    let cls = items.remove(0);
                    self.push(Node::Tuple(items));
                    let t = self.pop()?;
                    self.push(Node::Call(cls, t));
                }
                b'b' => {
                    let state = self.pop()?;
                    let obj = self.pop()?;
                    // A dict built with a state (OrderedDict's `_metadata`) stays a dict.
                    if matches!(self.arena[obj], Node::Dict(_)) {
                        self.stack.push(Slot::Obj(obj));
                    } else {
                        self.push(Node::Build(obj, state));
                    }
                }
                b'P' => {
                    let id = self.line()?.to_string();
                    self.leaf(Value::Str(id));
                    let i = self.pop()?;
                    self.push(Node::PersId(i));
                }
                b'Q' => {
                    let id = self.pop()?;
                    self.push(Node::PersId(id));
                }
                other => return Err(err(format!("unsupported opcode 0x{other:02x} at byte {at}"))),
            }
        }
    }

    fn tree(&self, i: usize, depth: usize, budget: &mut Budget) -> Result<Value, SnapshotError> {
        if depth > MAX_DEPTH {
            return Err(err("nested too deeply (or recursive)"));
        }
        budget.nodes = budget.nodes.checked_sub(1).ok_or_else(|| err("expands to too many values"))?;
        let seq = |v: &[usize], budget: &mut Budget| v.iter().map(|c| self.tree(*c, depth + 1, budget)).collect::<Result<Vec<_>, _>>();
        Ok(match &self.arena[i] {
            Node::Leaf(v) => {
                let size = match v {
                    Value::Str(x) | Value::Global(x) => x.len(),
                    Value::Bytes(x) | Value::BigInt(x) => x.len(),
                    _ => 0,
                };
                budget.bytes = budget.bytes.checked_sub(size).ok_or_else(|| err("expands to too many bytes"))?;
                v.clone()
            }
            Node::List(v) => Value::List(seq(v, budget)?),
            Node::Tuple(v) => Value::Tuple(seq(v, budget)?),
            Node::Set(v) => Value::Set(seq(v, budget)?),
            Node::Dict(pairs) => Value::Dict(
                pairs.iter().map(|(k, v)| Ok((self.tree(*k, depth + 1, budget)?, self.tree(*v, depth + 1, budget)?))).collect::<Result<_, SnapshotError>>()?,
            ),
            Node::Call(c, a) => {
                let args = match self.tree(*a, depth + 1, budget)? {
                    Value::Tuple(t) => t,
                    other => vec![other],
                };
                Value::Call(Box::new(self.tree(*c, depth + 1, budget)?), args)
            }
            Node::Build(o, s) => Value::Build(Box::new(self.tree(*o, depth + 1, budget)?), Box::new(self.tree(*s, depth + 1, budget)?)),
            Node::PersId(p) => Value::PersId(Box::new(self.tree(*p, depth + 1, budget)?)),
        })
    }
}

fn long_value(b: &[u8]) -> Value {
    if b.is_empty() {
        return Value::Int(0);
    }
    if b.len() > 8 {
        return Value::BigInt(b.to_vec());
    }
    let negative = b[b.len() - 1] & 0x80 != 0;
    let mut bytes = if negative { [0xffu8; 8] } else { [0u8; 8] };
    bytes[..b.len()].copy_from_slice(b);
    Value::Int(i64::from_le_bytes(bytes))
}

#[cfg(test)]
#[path = "pickle_tests.rs"]
mod tests;
