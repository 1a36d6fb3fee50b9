//! Writes every target's seeds (built from `tests/data`) to `<out>/<target>/<name>`:
//! `cargo run --manifest-path fuzz/Cargo.toml --example make_seeds -- fuzz/seeds`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "fuzz/seeds".into()));
    for (target, seeds) in coroner_fuzz::seeds::all() {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir)?;
        let total: usize = seeds.iter().map(|(_, b)| b.len()).sum();
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(name), bytes)?;
        }
        println!("{target}: {} seeds, {} bytes", seeds.len(), total);
    }
    Ok(())
}
