//! Stack dumps: the crash hook's `stack.txt` (a `reason:` line, a Python traceback, then every
//! thread's stack from `faulthandler.dump_traceback(all_threads=True)`) and plain faulthandler
//! output (`Fatal Python error: Segmentation fault` followed by the threads).

use crate::SnapshotError;

/// One thread's stack, most recent call first as faulthandler prints it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadStack {
    pub id: String,
    pub current: bool,
    /// `function (file:line)`.
    pub frames: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackDump {
    /// The hook's `reason:` line, or faulthandler's `Fatal Python error:` line.
    pub reason: Option<String>,
    /// The traceback's last line: `torch.OutOfMemoryError: CUDA out of memory...`.
    pub exception: Option<String>,
    /// The traceback's frames, outermost first as Python prints them.
    pub traceback: Vec<String>,
    pub threads: Vec<ThreadStack>,
}

/// `  File "/opt/job/worker.py", line 90, in main` (traceback) or
/// `  File "/opt/job/worker.py", line 48 in snapshot` (faulthandler).
fn frame(line: &str) -> Option<String> {
    let r = line.trim_start().strip_prefix("File \"")?;
    let close = r.find('"')?;
    let file = &r[..close];
    let rest = r[close + 1..].trim_start_matches(',').trim();
    let rest = rest.strip_prefix("line ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let func = rest[digits.len()..].trim_start_matches(',').trim().strip_prefix("in ").unwrap_or("?").trim();
    Some(format!("{func} ({file}:{digits})"))
}

/// Reads a stack dump. Text with no reason, traceback or thread is an error.
pub fn parse(bytes: &[u8]) -> Result<StackDump, SnapshotError> {
    let text = String::from_utf8_lossy(bytes);
    let mut d = StackDump::default();
    let mut in_tb = false;
    let mut thread: Option<ThreadStack> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(r) = line.strip_prefix("reason:") {
            d.reason.get_or_insert_with(|| r.trim().to_string());
            continue;
        }
        if let Some(r) = t.strip_prefix("Fatal Python error:") {
            d.reason.get_or_insert_with(|| format!("Fatal Python error: {}", r.trim()));
            continue;
        }
        if t.starts_with("Traceback (most recent call last)") {
            in_tb = true;
            continue;
        }
        let header = t.strip_prefix("Current thread ").map(|r| (true, r)).or_else(|| t.strip_prefix("Thread ").map(|r| (false, r)));
        if let Some((current, r)) = header.filter(|(_, r)| r.ends_with(':') && r.contains("most recent call first")) {
            in_tb = false;
            d.threads.extend(thread.take());
            let id = r.split_whitespace().next().unwrap_or_default().to_string();
            thread = Some(ThreadStack { id, current, frames: Vec::new() });
            continue;
        }
        if in_tb {
            if let Some(f) = frame(line) {
                d.traceback.push(f);
            } else if !line.starts_with(' ') && !t.is_empty() {
                // The exception line ends the traceback (chained tracebacks: the last one wins).
                d.exception = Some(t.to_string());
                in_tb = false;
            }
            continue;
        }
        if let (Some(th), Some(f)) = (thread.as_mut(), frame(line)) {
            th.frames.push(f);
        }
    }
    d.threads.extend(thread);
    if d.reason.is_none() && d.exception.is_none() && d.threads.is_empty() && d.traceback.is_empty() {
        return Err(SnapshotError::Format("no reason, traceback or thread stack found".into()));
    }
    Ok(d)
}

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

impl StackDump {
    pub fn highlights(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = self.reason.as_ref().or(self.exception.as_ref()) {
            out.push(format!("reason: {}", cut(r, 200)));
        }
        if let Some(f) = self.traceback.last() {
            out.push(format!("raised in {f}"));
        }
        let with_frames = self.threads.iter().filter(|t| !t.frames.is_empty()).count();
        if !self.threads.is_empty() {
            let mut s = format!("{} threads, {} with Python frames", self.threads.len(), with_frames);
            if let Some(f) = self.threads.iter().find(|t| t.current).and_then(|t| t.frames.first()) {
                s.push_str(&format!("; current thread in {f}"));
            }
            out.push(s);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ST: &[u8] = include_bytes!("../../../tests/data/snapshots/rank1.stack.txt");

    #[test]
    fn corpus_stack() {
        let d = parse(ST).unwrap();
        assert!(d.reason.as_deref().unwrap().starts_with("OutOfMemoryError: CUDA out of memory. Tried to allocate 200.00 GiB"));
        assert!(d.exception.as_deref().unwrap().starts_with("torch.OutOfMemoryError:"));
        assert_eq!(d.traceback, vec!["<module> (/opt/job/worker.py:118)", "main (/opt/job/worker.py:90)"]);
        assert_eq!(d.threads.len(), 3);
        let cur = d.threads.iter().find(|t| t.current).unwrap();
        assert_eq!(cur.frames, vec!["snapshot (/opt/job/worker.py:48)", "<module> (/opt/job/worker.py:121)"]);
        let h = d.highlights();
        assert_eq!(h[1], "raised in main (/opt/job/worker.py:90)");
        assert_eq!(h[2], "3 threads, 1 with Python frames; current thread in snapshot (/opt/job/worker.py:48)");
    }

    #[test]
    fn plain_faulthandler_segfault() {
        let t = b"Fatal Python error: Segmentation fault\n\nThread 0x00007f (most recent call first):\n  File \"/x.py\", line 3 in spin\n\nCurrent thread 0x00008 (most recent call first):\n  File \"/opt/job/worker.py\", line 77 in crash\n  File \"/opt/job/worker.py\", line 9 in <module>\n\nExtension modules: numpy (total: 1)\n";
        let d = parse(t).unwrap();
        assert_eq!(d.reason.as_deref(), Some("Fatal Python error: Segmentation fault"));
        assert_eq!(d.threads.len(), 2);
        assert_eq!(d.threads[1].frames[0], "crash (/opt/job/worker.py:77)");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse(b"").is_err());
        assert!(parse(b"hello\nworld\n").is_err());
        assert!(parse(b"\xff\xfe\x00").is_err());
        // Truncated mid-way: what was read is kept.
        let d = parse(&ST[..ST.len() - 40]).unwrap();
        assert!(d.reason.is_some());
    }
}
