//! Shell completions and manual pages, generated from the command-line
//! definitions themselves so they never drift from them.

use anyhow::{Context, Result};
use clap::CommandFactory;
use std::path::Path;

/// Completions for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut cmd = crate::Cli::command();
    clap_complete::generate(shell, &mut cmd, "mballoc", &mut std::io::stdout());
    Ok(())
}

/// mballoc.1 and a page per subcommand (mballoc-lab-run.1, ...) in `out`.
pub fn man(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
    let mut written = 0;
    let mut stack = vec![(crate::Cli::command(), "mballoc".to_string())];
    while let Some((cmd, name)) = stack.pop() {
        let cmd = cmd.name(name.clone());
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
        let path = out.join(format!("{name}.1"));
        std::fs::write(&path, page).with_context(|| path.display().to_string())?;
        written += 1;
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            stack.push((sub.clone(), format!("{name}-{}", sub.get_name())));
        }
    }
    println!("{written} pages in {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_command_and_option_says_what_it_does() {
        let mut missing = Vec::new();
        let mut stack = vec![(crate::Cli::command(), "mballoc".to_string())];
        while let Some((cmd, path)) = stack.pop() {
            if path != "mballoc" && cmd.get_about().is_none() {
                missing.push(path.clone());
            }
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id != "help" && id != "version" && a.get_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                stack.push((sub.clone(), format!("{path} {}", sub.get_name())));
            }
        }
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }
}
