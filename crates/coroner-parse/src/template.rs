//! A small Drain-style template miner: lines with the same token count and first token whose
//! tokens mostly agree share a template; differing positions (and any token holding a digit)
//! become `<*>`.

use std::collections::HashMap;

/// The id of a mined template, stable for the miner's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TemplateId(pub u32);

const WILD: &str = "<*>";
const MAX_TOKENS: usize = 64;

#[derive(Debug, Clone)]
struct Template {
    tokens: Vec<String>,
    count: u64,
}

/// Groups lines into templates.
#[derive(Debug, Clone)]
pub struct TemplateMiner {
    groups: HashMap<(usize, String), Vec<u32>>,
    templates: Vec<Template>,
    similarity: f64,
}

impl Default for TemplateMiner {
    fn default() -> Self {
        Self::new()
    }
}

fn mask(tok: &str) -> String {
    if tok.bytes().any(|c| c.is_ascii_digit()) {
        WILD.to_string()
    } else {
        tok.to_string()
    }
}

impl TemplateMiner {
    pub fn new() -> Self {
        TemplateMiner { groups: HashMap::new(), templates: Vec::new(), similarity: 0.5 }
    }

    /// Adds a line; returns the template it joined or founded.
    pub fn add(&mut self, text: &str) -> TemplateId {
        let tokens: Vec<String> = text.split_whitespace().take(MAX_TOKENS).map(mask).collect();
        let key = (tokens.len(), tokens.first().cloned().unwrap_or_default());
        let candidates = self.groups.entry(key).or_default();
        let mut best: Option<(u32, f64)> = None;
        for &id in candidates.iter() {
            let Some(t) = self.templates.get(id as usize) else { continue };
            let same = t.tokens.iter().zip(&tokens).filter(|(a, b)| a == b || a.as_str() == WILD).count();
            let sim = if tokens.is_empty() { 1.0 } else { same as f64 / tokens.len() as f64 };
            if sim >= self.similarity && best.is_none_or(|(_, s)| sim > s) {
                best = Some((id, sim));
            }
        }
        if let Some((id, _)) = best {
            if let Some(t) = self.templates.get_mut(id as usize) {
                for (a, b) in t.tokens.iter_mut().zip(&tokens) {
                    if a != b {
                        *a = WILD.to_string();
                    }
                }
                t.count += 1;
            }
            return TemplateId(id);
        }
        let id = u32::try_from(self.templates.len()).unwrap_or(u32::MAX);
        self.templates.push(Template { tokens, count: 1 });
        candidates.push(id);
        TemplateId(id)
    }

    /// Every template (tokens joined by one space) with how many lines it has seen, by id.
    pub fn templates(&self) -> Vec<(String, u64)> {
        self.templates.iter().map(|t| (t.tokens.join(" "), t.count)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_similar_lines() {
        let mut m = TemplateMiner::new();
        let a = m.add("vm:1141:1141 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM");
        let b = m.add("vm:1141:1141 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM");
        let c = m.add("step 4 loss 1.45");
        let d = m.add("step 5 loss 1.30");
        let e = m.add("Connection closed by peer");
        assert_eq!(a, b);
        assert_eq!(c, d);
        assert_ne!(a, c);
        assert_ne!(e, c);
        let t = m.templates();
        assert_eq!(t[c.0 as usize], ("step <*> loss <*>".to_string(), 2));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn differing_words_become_wildcards() {
        let mut m = TemplateMiner::new();
        m.add("worker alpha started ok");
        m.add("worker beta started ok");
        assert_eq!(m.templates()[0], ("worker <*> started ok".to_string(), 2));
    }
}
