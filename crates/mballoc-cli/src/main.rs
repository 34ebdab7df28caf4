//! The `mballoc` command (everything is in the library: `mballoc_cli::main`).

fn main() -> std::process::ExitCode {
    mballoc_cli::main()
}
