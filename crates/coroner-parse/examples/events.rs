//! Prints the events the parser makes of a log file, line by line: what coroner understood of
//! each line before any analysis (`cargo run -p coroner-parse --example events -- FILE`).

use coroner_model::{LogLine, Stream};
use coroner_parse::RankParser;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: events FILE");
        std::process::exit(2);
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        eprintln!("read {path}: {e}");
        std::process::exit(1)
    });
    let mut parser = RankParser::new(None);
    let mut out = Vec::new();
    for (seq, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = LogLine { rank: None, stream: Stream::Stdout, seq: seq as u64, capture_ns: seq as i64, bytes: line.to_vec() };
        parser.push(&line, &mut out);
        for e in out.drain(..) {
            println!("{:>5} {} {:?}", seq + 1, e.kind.name(), e.kind.message().chars().take(160).collect::<String>());
        }
    }
    parser.finish(&mut out);
    for e in out.drain(..) {
        println!("  end {} {:?}", e.kind.name(), e.kind.message().chars().take(160).collect::<String>());
    }
}
