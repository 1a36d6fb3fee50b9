//! The line parser (`coroner_parse::RankParser`) on arbitrary bytes, invalid UTF-8 and over-long
//! lines included; the rank-prefix reader and the template miner on the same lines.
//!
//! Checked: no panic; every event points at a line that was fed (its seq, stream and capture
//! time) and quotes text of a fed line; a parser that knows its rank files every event under it;
//! the parse is deterministic; diagnostics stay bounded by the input.

#![no_main]

use coroner_fuzz::LineFlags;
use coroner_model::{LogLine, Rank, Stream};
use coroner_parse::{prefix::split_rank_prefix, RankParser, TemplateMiner, MAX_LINE};
use libfuzzer_sys::fuzz_target;

const T0: i64 = 1_796_029_196_000_000_000;

fn capture(seq: u64) -> i64 {
    T0 + seq as i64 * 1_000
}

fn parse(lines: &[LogLine], rank: Option<Rank>) -> (Vec<coroner_model::Event>, usize) {
    let mut parser = RankParser::new(rank);
    let mut events = Vec::new();
    for l in lines {
        parser.push(l, &mut events);
    }
    parser.finish(&mut events);
    (events, parser.diagnostics().len())
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, text)) = data.split_first() else { return };
    let flags = LineFlags(flags);
    let stream = match flags.stream() {
        0 => Stream::Stdout,
        1 => Stream::Stderr,
        _ => Stream::File,
    };
    let rank = flags.parser_rank().map(Rank);
    let mut raw: Vec<Vec<u8>> = text.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    if flags.pad_last_line() {
        if let Some(last) = raw.last_mut().filter(|l| !l.is_empty()) {
            // Past the cap, whatever the line's length: the cut lands anywhere in it.
            let unit = last.clone();
            while last.len() <= MAX_LINE {
                last.extend_from_slice(&unit);
            }
        }
    }
    let lines: Vec<LogLine> = raw
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| LogLine {
            rank: flags.lines_name_rank().then_some(Rank(i as u32 % 4)),
            stream,
            seq: i as u64,
            capture_ns: capture(i as u64),
            bytes,
        })
        .collect();

    let (events, diagnostics) = parse(&lines, rank);
    // Two diagnostics at most per line (cut, invalid UTF-8) and one per traceback block.
    assert!(diagnostics <= 3 * lines.len() + 1, "{diagnostics} diagnostics for {} lines", lines.len());
    let texts: Vec<String> = lines.iter().map(|l| String::from_utf8_lossy(&l.bytes[..l.bytes.len().min(MAX_LINE)]).into_owned()).collect();
    for e in &events {
        let seq = e.line.seq as usize;
        assert!(seq < lines.len(), "event for line {seq} of {}: {e:?}", lines.len());
        assert_eq!(e.line.stream, stream);
        assert_eq!(e.capture_ns, capture(e.line.seq), "{e:?}");
        if let Some(r) = rank {
            assert_eq!(e.rank, Some(r), "{e:?}");
        }
        assert!(e.text.len() <= 3 * MAX_LINE, "event text of {} bytes", e.text.len());
        // Most events quote their own line; a block's may quote a later one of the block.
        let quoted = texts[seq].contains(e.text.as_str()) || texts[seq..].iter().any(|t| t.contains(e.text.as_str()));
        assert!(quoted, "event text not from any line: {:?}", e.text);
    }
    let (again, _) = parse(&lines, rank);
    assert_eq!(format!("{events:?}"), format!("{again:?}"), "the parse is not deterministic");

    let mut miner = TemplateMiner::new();
    let mut ids = Vec::with_capacity(lines.len());
    for l in &lines {
        let p = split_rank_prefix(&l.bytes);
        assert!(p.len <= l.bytes.len());
        ids.push(miner.add(&String::from_utf8_lossy(p.rest(&l.bytes))));
    }
    let templates = miner.templates();
    assert!(ids.iter().all(|id| (id.0 as usize) < templates.len()));
    let seen: u64 = templates.iter().map(|(_, n)| n).sum();
    assert_eq!(seen, lines.len() as u64);
});
