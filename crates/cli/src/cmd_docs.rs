//! `ecstack generate-docs --out DIR` (hidden): man pages and shell completions generated from the
//! clap definitions, so they never drift from `--help`. `DIR/man/` gets `ecstack.1` and one
//! `ecstack-<command>[-<subcommand>...].1` per visible (sub)command, recursively; `DIR/completions/`
//! gets `ecstack.bash`, `_ecstack` (zsh) and `ecstack.fish`. scripts/setup.sh installs them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Command};
use clap_complete::Shell;

#[derive(Args)]
pub struct GenerateDocsArgs {
    /// Output directory (created): man pages in DIR/man, completions in DIR/completions
    #[arg(long)]
    out: PathBuf,
}

impl GenerateDocsArgs {
    #[cfg(test)]
    pub fn for_dir(out: PathBuf) -> GenerateDocsArgs {
        GenerateDocsArgs { out }
    }
}

pub fn run(a: GenerateDocsArgs, cmd: Command) -> Result<()> {
    let man = a.out.join("man");
    let completions = a.out.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let pages = man_pages(cmd.clone(), &man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "ecstack", &completions)
            .with_context(|| format!("writing the {shell} completions"))?;
    }
    println!(
        "{pages} man pages in {}, bash/zsh/fish completions in {}",
        man.display(),
        completions.display()
    );
    Ok(())
}

/// Write every visible command's page to `dir`; returns how many.
fn man_pages(cmd: Command, dir: &Path) -> Result<usize> {
    let cmd = cmd.disable_help_subcommand(true);
    clap_mangen::generate_to(cmd.clone(), dir)
        .with_context(|| format!("writing man pages to {}", dir.display()))?;
    Ok(page_names(cmd).len())
}

/// The page name (without `.1`) of every visible command, `ecstack` first: `ecstack-array-create`.
pub fn page_names(cmd: Command) -> Vec<String> {
    fn walk(cmd: &Command, name: String, out: &mut Vec<String>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            walk(sub, format!("{name}-{}", sub.get_name()), out);
        }
        out.push(name);
    }
    let mut out = Vec::new();
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    walk(&cmd, cmd.get_name().to_string(), &mut out);
    out.reverse();
    out
}
