//! `kubectl tenantflux policy ...`: keys, signing and verification (local, no cluster), and
//! pushing a signed policy to the current context's agent.

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueHint};
use serde::Serialize;
use tenantflux_core::policy::signing::{self, SignedPolicy};
use tenantflux_proto::v1::{GetPolicyRequest, PushPolicyRequest};

use crate::{
    connect::{Agent, ConnectOptions},
    output::Printer,
};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Make an ed25519 key pair: DIR/ed25519.key (private, mode 0600) and DIR/ed25519.pub
    /// (install it with the agent: Helm value policy.publicKey).
    Keygen {
        /// Directory to write the key files to (created if missing; existing keys are kept).
        #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
        out: PathBuf,
    },
    /// Check a policy and sign it; writes the signed policy to stdout or --out.
    Sign {
        #[command(flatten)]
        file: FileArg,
        /// The private key (PEM, as keygen or `openssl genpkey -algorithm ed25519` write it).
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        key: PathBuf,
        /// Write the signed policy here instead of stdout.
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        out: Option<PathBuf>,
    },
    /// Check a signed policy against a public key, as the agent does.
    Verify {
        #[command(flatten)]
        file: FileArg,
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        public_key: PathBuf,
    },
    /// Send a signed policy to the current context's agent.
    Push {
        #[command(flatten)]
        file: FileArg,
    },
    /// Show the policy the agent holds.
    Show,
}

#[derive(Debug, Args)]
pub struct FileArg {
    /// The file to read (`-` for stdin).
    #[arg(short = 'f', long = "filename", value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub path: PathBuf,
}

impl FileArg {
    pub(crate) fn read(&self) -> anyhow::Result<String> {
        if self.path == Path::new("-") {
            return std::io::read_to_string(std::io::stdin()).context("reading stdin");
        }
        fs::read_to_string(&self.path).with_context(|| format!("reading {}", self.path.display()))
    }
}

/// The commands that need no cluster.
pub fn run_local(command: &PolicyCommand, printer: &Printer) -> Option<anyhow::Result<()>> {
    Some(match command {
        PolicyCommand::Keygen { out } => keygen(out, printer),
        PolicyCommand::Sign { file, key, out } => sign(file, key, out.as_deref()),
        PolicyCommand::Verify { file, public_key } => verify(file, public_key, printer),
        PolicyCommand::Push { .. } | PolicyCommand::Show => return None,
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KeyView {
    key_id: String,
    private_key: String,
    public_key: String,
}

fn keygen(dir: &Path, printer: &Printer) -> anyhow::Result<()> {
    let private_path = dir.join("ed25519.key");
    let public_path = dir.join("ed25519.pub");
    for path in [&private_path, &public_path] {
        if path.exists() {
            bail!(
                "{} exists; keygen never overwrites a key (choose another --out)",
                path.display()
            );
        }
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let key = signing::generate()?;
    write_private(&private_path, &signing::private_pem(&key))?;
    fs::write(&public_path, signing::public_pem(&key.verifying_key()))
        .with_context(|| format!("writing {}", public_path.display()))?;
    let view = KeyView {
        key_id: signing::key_id(&key.verifying_key()),
        private_key: private_path.display().to_string(),
        public_key: public_path.display().to_string(),
    };
    printer.print(&view, |v, _| {
        format!(
            "key {}\nprivate key: {} (keep it secret)\npublic key:  {} (install with the agent: Helm value policy.publicKey)\n",
            v.key_id, v.private_key, v.public_key
        )
    })
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

fn sign(file: &FileArg, key: &Path, out: Option<&Path>) -> anyhow::Result<()> {
    let text = file.read()?;
    let key_text = fs::read_to_string(key).with_context(|| format!("reading {}", key.display()))?;
    let key = signing::read_private_key(&key_text)
        .with_context(|| format!("reading the private key {}", key.display()))?;
    let (signed, policy) = SignedPolicy::sign(&text, &key)
        .with_context(|| format!("{} is not a valid policy", file.path.display()))?;
    let yaml = signed.to_yaml();
    match out {
        Some(out) => {
            fs::write(out, &yaml).with_context(|| format!("writing {}", out.display()))?;
            eprintln!(
                "signed {policy} with key {} into {}",
                signed.key_id,
                out.display()
            );
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(yaml.as_bytes())?;
            stdout.flush()?;
        }
    }
    Ok(())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct VerifiedView {
    name: String,
    generation: u64,
    key_id: String,
}

fn verify(file: &FileArg, public_key: &Path, printer: &Printer) -> anyhow::Result<()> {
    let text = file.read()?;
    let key_text = fs::read_to_string(public_key)
        .with_context(|| format!("reading {}", public_key.display()))?;
    let key = signing::read_public_key(&key_text)
        .with_context(|| format!("reading the public key {}", public_key.display()))?;
    let policy = SignedPolicy::parse(&text)
        .and_then(|signed| signed.verify(&key))
        .with_context(|| format!("{} does not verify", file.path.display()))?;
    let view = VerifiedView {
        name: policy.name().to_owned(),
        generation: policy.generation(),
        key_id: signing::key_id(&key),
    };
    printer.print(&view, |v, _| {
        format!(
            "verified: policy {:?} generation {} signed by key {}\n",
            v.name, v.generation, v.key_id
        )
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PushView {
    name: String,
    generation: u64,
    previous_generation: u64,
    unchanged: bool,
}

pub async fn run_remote(
    command: PolicyCommand,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<()> {
    match command {
        PolicyCommand::Push { file } => {
            let text = file.read()?;
            // The agent verifies too; parsing here gives a local, earlier error for a file
            // that is not a signed policy at all.
            SignedPolicy::parse(&text)
                .with_context(|| format!("{} is not a signed policy", file.path.display()))?;
            let agent = Agent::connect(options).await?;
            let response = agent
                .policy()
                .push_policy(PushPolicyRequest {
                    signed_policy: text,
                })
                .await
                .map_err(|status| agent.error(&status))
                .context("the agent refused the policy")?
                .into_inner();
            let view = PushView {
                name: response.name,
                generation: response.generation,
                previous_generation: response.previous_generation,
                unchanged: response.unchanged,
            };
            printer.print(&view, |v, _| {
                if v.unchanged {
                    format!(
                        "policy {:?} generation {} unchanged (the agent already holds it)\n",
                        v.name, v.generation
                    )
                } else {
                    format!(
                        "policy {:?} generation {} accepted (was {})\n",
                        v.name, v.generation, v.previous_generation
                    )
                }
            })
        }
        PolicyCommand::Show => {
            let agent = Agent::connect(options).await?;
            let state = agent
                .policy()
                .get_policy(GetPolicyRequest {})
                .await
                .map_err(|status| agent.error(&status))?
                .into_inner();
            let view = ShowView {
                present: state.present,
                name: state.name,
                generation: state.generation,
                key_id: state.key_id,
                problems: state.problems,
                policy: state.policy,
            };
            printer.print(&view, |v, _| {
                let mut out = if v.present {
                    format!(
                        "policy {:?} generation {} (key {})\n",
                        v.name, v.generation, v.key_id
                    )
                } else {
                    "no policy: the agent holds none\n".to_owned()
                };
                for problem in &v.problems {
                    out.push_str(&format!("problem: {problem}\n"));
                }
                if v.present {
                    out.push_str("---\n");
                    out.push_str(&v.policy);
                }
                out
            })
        }
        local => run_local(&local, printer).unwrap_or(Ok(())),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ShowView {
    present: bool,
    name: String,
    generation: u64,
    key_id: String,
    problems: Vec<String>,
    policy: String,
}
