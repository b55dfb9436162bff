//! kubectl_complete-tenantflux: kubectl runs it with the words after `kubectl tenantflux` (the
//! last one being the word to complete) and shows what it prints (cobra's protocol).

#![forbid(unsafe_code)]

use std::io::Write as _;

use clap::CommandFactory as _;
use kubectl_tenantflux::{cli::Cli, complete};

fn main() {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // Completion never fails loudly: a shell prompt is no place for an error message.
    let _ = std::io::stdout().write_all(complete::cobra(&Cli::command(), &args).as_bytes());
}
