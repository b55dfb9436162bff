//! The policy commands that need no cluster: keys, keyrings, signing and verifying.

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};
use serde::Serialize;
use tenantflux_core::policy::signing::{self, SignedPolicy};

use super::args::{KeyringCommand, PolicyCommand};
use crate::{context::FileArg, output::Printer};

/// The commands that need no cluster.
pub fn run_local(command: &PolicyCommand, printer: &Printer) -> Option<anyhow::Result<()>> {
    Some(match command {
        PolicyCommand::Keygen { out, root } => keygen(out, *root, printer),
        PolicyCommand::Keyring(KeyringCommand::Sign {
            version,
            keys,
            revoke,
            root_keys,
            out,
        }) => keyring_sign(*version, keys, revoke, root_keys, out.as_deref()),
        PolicyCommand::Sign {
            file,
            key,
            out,
            expires_in,
            envelope,
        } => sign(file, key, out.as_deref(), *expires_in, envelope == "v1"),
        PolicyCommand::Verify { file, public_key } => verify(file, public_key, printer),
        PolicyCommand::Push { .. }
        | PolicyCommand::Show
        | PolicyCommand::Publish { .. }
        | PolicyCommand::Keyring(KeyringCommand::Publish { .. }) => {
            return None;
        }
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KeyView {
    key_id: String,
    private_key: String,
    public_key: String,
}

fn keygen(dir: &Path, root: bool, printer: &Printer) -> anyhow::Result<()> {
    let name = if root { "root" } else { "ed25519" };
    let private_path = dir.join(format!("{name}.key"));
    let public_path = dir.join(format!("{name}.pub"));
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
    let install = if root {
        "install with the agent: --policy-root-key, Helm value policy.rootKeys"
    } else {
        "install with the agent: Helm value policy.publicKey, or name it in a keyring"
    };
    printer.print(&view, |v, _| {
        format!(
            "key {}\nprivate key: {} (keep it secret)\npublic key:  {} ({install})\n",
            v.key_id, v.private_key, v.public_key
        )
    })
}

fn keyring_sign(
    version: u64,
    keys: &[PathBuf],
    revoke: &[String],
    root_keys: &[PathBuf],
    out: Option<&Path>,
) -> anyhow::Result<()> {
    let read = |path: &PathBuf| {
        fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let keys = keys
        .iter()
        .map(|path| {
            signing::read_public_key(&read(path)?)
                .with_context(|| format!("reading the public key {}", path.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let roots = root_keys
        .iter()
        .map(|path| {
            signing::read_private_key(&read(path)?)
                .with_context(|| format!("reading the root key {}", path.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let document = tenantflux_core::policy::keyring::document(version, &keys, revoke);
    let signed = tenantflux_core::policy::keyring::sign(&document, &roots)
        .context("the keyring is refused")?;
    let yaml = signed.to_yaml();
    write_signed(out, &yaml, |out| {
        format!(
            "signed keyring version {version} ({} active key(s), {} revoked) with {} root key(s) into {}",
            keys.len(),
            revoke.len(),
            roots.len(),
            out.display()
        )
    })
}

/// Writes a signed document to `out` and says so on stderr, or to stdout without `out`.
fn write_signed(
    out: Option<&Path>,
    yaml: &str,
    said: impl FnOnce(&Path) -> String,
) -> anyhow::Result<()> {
    match out {
        Some(out) => {
            fs::write(out, yaml).with_context(|| format!("writing {}", out.display()))?;
            eprintln!("{}", said(out));
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(yaml.as_bytes())?;
            stdout.flush()?;
        }
    }
    Ok(())
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

fn sign(
    file: &FileArg,
    key: &Path,
    out: Option<&Path>,
    expires_in: std::time::Duration,
    v1: bool,
) -> anyhow::Result<()> {
    let text = file.read()?;
    let key_text = fs::read_to_string(key).with_context(|| format!("reading {}", key.display()))?;
    let key = signing::read_private_key(&key_text)
        .with_context(|| format!("reading the private key {}", key.display()))?;
    let invalid = || format!("{} is not a valid policy", file.path.display());
    let (signed, policy) = if v1 {
        SignedPolicy::sign_v1(&text, &key).with_context(invalid)?
    } else {
        let now = signing::now();
        let expires_at = i64::try_from(expires_in.as_secs())
            .ok()
            .and_then(|s| now.checked_add(s))
            .context("--expires-in is too long")?;
        SignedPolicy::sign(&text, &key, now, expires_at).map_err(|err| match err {
            signing::SignError::Policy(err) => anyhow::Error::new(err).context(invalid()),
            err @ signing::SignError::Expiry { .. } => {
                anyhow::Error::new(err).context("--expires-in must be more than 0")
            }
        })?
    };
    for selector in policy.name_only_clusters() {
        eprintln!(
            "warning: spec.clusters selects [{selector}] by name only: the name is the agent's \
             --cluster-name (TENANTFLUX_CLUSTER_NAME), which whoever runs the agent can change; add \
             uid (the UID of the cluster's kube-system namespace) to bind the policy to one cluster"
        );
    }
    write_signed(out, &signed.to_yaml(), |out| {
        format!(
            "signed {policy} with key {} into {}",
            signed.key_id,
            out.display()
        )
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct VerifiedView {
    name: String,
    generation: u64,
    key_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    issued_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<String>,
    stale: bool,
}

fn verify(file: &FileArg, public_key: &Path, printer: &Printer) -> anyhow::Result<()> {
    let text = file.read()?;
    let key_text = fs::read_to_string(public_key)
        .with_context(|| format!("reading {}", public_key.display()))?;
    let key = signing::read_public_key(&key_text)
        .with_context(|| format!("reading the public key {}", public_key.display()))?;
    let verified = SignedPolicy::parse(&text)
        .and_then(|signed| signed.verify_claims(&key))
        .with_context(|| format!("{} does not verify", file.path.display()))?;
    let policy = &verified.policy;
    let validity = verified.validity;
    let view = VerifiedView {
        name: policy.name().to_owned(),
        generation: policy.generation(),
        key_id: signing::key_id(&key),
        issued_at: validity.map(|v| signing::format_timestamp(v.issued_at)),
        expires_at: validity.map(|v| signing::format_timestamp(v.expires_at)),
        stale: validity.is_some_and(|v| v.is_expired_at(signing::now())),
    };
    printer.print(&view, |v, _| {
        let expiry = match &v.expires_at {
            Some(at) if v.stale => format!(", expired at {at} (agents report it stale)"),
            Some(at) => format!(", expires at {at}"),
            None => " (envelope v1: never expires)".to_owned(),
        };
        format!(
            "verified: policy {:?} generation {} signed by key {}{expiry}\n",
            v.name, v.generation, v.key_id
        )
    })
}
