//! `kubectl tenantflux operator ...`: the platform's review of a flux-operator release the
//! agents' build does not know, and the vouching that lets every agent install it. Both run
//! on the platform engineer's machine: they read registries and files, never a cluster.

mod args;
mod fetch;
mod render;

use std::{fs, io::Write as _};

use anyhow::{Context as _, bail};
use tenantflux_core::{
    operator::KNOWN_RELEASES,
    policy::{Document, Policy, Vouching},
    review::{self, Review},
};

pub use args::{OperatorCommand, ReviewArgs};

use crate::output::Printer;

pub async fn run(command: OperatorCommand, printer: &Printer) -> anyhow::Result<()> {
    match command {
        OperatorCommand::Review(args) => {
            let review = review_of(&args).await?;
            printer.print(&review, render::review_table)
        }
        OperatorCommand::Vouch {
            review: args,
            file,
            out,
            rollout,
        } => {
            let policy_text = file.read()?;
            if rollout && !args.source.starts_with("oci://") {
                bail!(
                    "--rollout needs an oci:// SOURCE: agents cannot read {} (put the \
                     install.yaml in a ConfigMap and set spec.operator.bundle by hand)",
                    args.source
                );
            }
            let review = review_of(&args).await?;
            let (text, notes) = vouch(&policy_text, &review, rollout)?;
            for note in notes {
                eprintln!("{note}");
            }
            match out {
                Some(path) => {
                    fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?
                }
                None => std::io::stdout().lock().write_all(text.as_bytes())?,
            }
            Ok(())
        }
    }
}

/// Reads the release and the one to compare it with, and reviews them.
async fn review_of(args: &ReviewArgs) -> anyhow::Result<Review> {
    let new = fetch::read(&args.source, args.plain_http).await?;
    let against = match &args.against {
        Some(against) => against.clone(),
        None => default_against(&args.source, &new.version)?,
    };
    let old = fetch::read(&against, args.plain_http).await?;
    Ok(review::review(&new, &old))
}

/// The same OCI repository at the newest release the build knows that is not newer than
/// `version` (the nearest one to compare with).
fn default_against(source: &str, version: &str) -> anyhow::Result<String> {
    let Some(rest) = source.strip_prefix("oci://") else {
        bail!(
            "{source} is a file: name the release to compare it with (--against \
             oci://REGISTRY/REPOSITORY:TAG or --against PATH of another install.yaml)"
        );
    };
    // REGISTRY[:PORT]/REPOSITORY[:TAG][@DIGEST]: the tag is a colon after the last slash.
    let rest = rest.split_once('@').map_or(rest, |(name, _)| name);
    let (path, last) = rest.rsplit_once('/').unwrap_or(("", rest));
    let last = last.split_once(':').map_or(last, |(name, _)| name);
    let repository = if path.is_empty() {
        last.to_owned()
    } else {
        format!("{path}/{last}")
    };
    let parse = |v: &str| semver::Version::parse(v.trim_start_matches('v')).ok();
    let target = parse(version);
    let nearest = KNOWN_RELEASES
        .iter()
        .rev()
        .find(|known| match (parse(known), &target) {
            (Some(known), Some(target)) => known <= *target,
            _ => false,
        })
        .or(KNOWN_RELEASES.last())
        .context("the build knows no flux-operator release")?;
    Ok(format!("oci://{repository}:{nearest}"))
}

/// `policy` with a vouching for the reviewed release (replacing one for the same version) and
/// its generation raised by one, as YAML; and notes for the engineer.
fn vouch(policy: &str, review: &Review, rollout: bool) -> anyhow::Result<(String, Vec<String>)> {
    let mut document: Document = tenantflux_core::yaml::from_str(policy)
        .context("the policy file is not a policy document")?;
    let mut notes = Vec::new();
    let vouching = Vouching {
        version: review.version.clone(),
        digest: review.digest.clone(),
        source: Some(review.source.clone()),
        cluster_rules: review.rules_added.clone(),
    };
    let operator = document.spec.operator.get_or_insert_with(Default::default);
    operator.vouched.retain(|v| v.version != vouching.version);
    operator.vouched.push(vouching);
    if rollout {
        let name = review
            .source
            .split_once('@')
            .map_or(review.source.as_str(), |(n, _)| n);
        let pinned = format!("{name}@{}", review.digest);
        notes.push(format!(
            "spec.operator.bundle is {pinned}: agents that own their flux-operator install \
             switch to it with this policy"
        ));
        operator.bundle = Some(pinned);
    }
    document.spec.generation += 1;
    notes.push(format!(
        "vouched for flux-operator {} ({}); spec.generation raised to {}: sign and publish it \
         (`kubectl tenantflux policy sign`, then `policy publish` or `fleet policy push`)",
        review.version, review.digest, document.spec.generation
    ));
    if !review.rules_added.is_empty() {
        notes.push(format!(
            "the vouching allows {} ClusterRole rule(s) beyond {}: see clusterRules",
            review.rules_added.len(),
            review.against_version
        ));
    }
    let policy =
        Policy::from_document(document).context("the policy with the vouching is not valid")?;
    if let Some(allowed) = policy.operator_versions()
        && let Ok(version) = semver::Version::parse(review.version.trim_start_matches('v'))
        && !allowed.allows(&version)
    {
        notes.push(format!(
            "warning: spec.operator.versions does not allow {} ({allowed}): agents keep \
             refusing it until it does",
            review.version
        ));
    }
    Ok((policy.to_yaml(), notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_comparison_is_the_nearest_known_release_in_the_same_repository() {
        assert_eq!(
            default_against(
                "oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.61.0",
                "v0.61.0"
            )
            .unwrap(),
            format!(
                "oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:{}",
                KNOWN_RELEASES.last().unwrap()
            )
        );
        assert_eq!(
            default_against("oci://127.0.0.1:5000/fo:v0.58.5", "v0.58.5").unwrap(),
            "oci://127.0.0.1:5000/fo:v0.58.1"
        );
        let err = default_against("install.yaml", "v0.61.0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--against"), "{err}");
    }

    #[test]
    fn vouching_adds_or_replaces_the_entry_and_raises_the_generation() {
        let policy = "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata:\n  name: p\nspec:\n  generation: 4\n  operator:\n    versions: \">=0.58.0 <0.60.0\"\n";
        let review = Review {
            version: "v0.61.0".into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            source: "oci://r/fo:v0.61.0".into(),
            against_version: "v0.59.0".into(),
            ..Review::default()
        };
        let (text, notes) = vouch(policy, &review, false).unwrap();
        let parsed = Policy::parse(&text).unwrap();
        assert_eq!(parsed.generation(), 5);
        assert_eq!(parsed.vouched().len(), 1);
        assert_eq!(parsed.vouched()[0].digest, review.digest);
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("warning: spec.operator.versions")),
            "{notes:?}"
        );
        // Again, with another digest: one entry, the new one.
        let again = Review {
            digest: format!("sha256:{}", "b".repeat(64)),
            ..review
        };
        let (text, _) = vouch(&text, &again, true).unwrap();
        let parsed = Policy::parse(&text).unwrap();
        assert_eq!(parsed.generation(), 6);
        assert_eq!(parsed.vouched().len(), 1);
        assert_eq!(parsed.vouched()[0].digest, again.digest);
        // --rollout: the source, pinned by the reviewed digest, is the policy's bundle.
        assert_eq!(
            parsed.operator_bundle(),
            Some(format!("oci://r/fo:v0.61.0@{}", again.digest).as_str())
        );
    }
}
