//! `cargo run -p coroner-field --example field -- [--dir D] [--json] [--only ID] [--baseline] [--half dev|held] [--wrong]`:
//! the field harness without building coroner-bench (which builds the server). `coroner-bench
//! field` is the same thing.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match coroner_field::cli::main(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("coroner-field: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
