//! The review as text, section by section; `-o json|yaml` prints the [`Review`] itself.

use std::fmt::Write as _;

use tenantflux_core::review::Review;

use crate::output::{Style, Tone, printable};

pub fn review_table(review: &Review, style: Style) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "flux-operator {} ({})\n  source:   {}\n  against:  {} ({}) from {}",
        review.version,
        review.digest,
        printable(&review.source),
        review.against_version,
        review.against_digest,
        printable(&review.against_source)
    );
    if review.is_empty() {
        out.push_str(
            "\nNo difference in CRDs, cluster RBAC, the Deployment or the distributions.\n",
        );
        return out;
    }
    let list = |out: &mut String, title: &str, items: &[String]| {
        if !items.is_empty() {
            let _ = writeln!(out, "\n{title}");
            for item in items {
                let _ = writeln!(out, "  {}", printable(item));
            }
        }
    };
    list(&mut out, "CRDs added", &review.crds_added);
    list(&mut out, "CRDs removed", &review.crds_removed);
    for crd in &review.crds_changed {
        let _ = writeln!(out, "\nCRD {} changed", crd.name);
        if let Some((before, after)) = &crd.versions {
            let _ = writeln!(
                out,
                "  versions: {} -> {}",
                before.join(", "),
                after.join(", ")
            );
        }
        for change in &crd.schema {
            let _ = writeln!(
                out,
                "  {} {}: {}",
                change.version,
                printable(&change.path),
                printable(&change.change)
            );
        }
        if crd.more > 0 {
            let _ = writeln!(
                out,
                "  ... and {} more schema changes (-o yaml lists them)",
                crd.more
            );
        }
    }
    if !review.rules_added.is_empty() {
        let _ = writeln!(out, "\nClusterRole rules added (a vouching names them)");
        for rule in &review.rules_added {
            let _ = writeln!(
                out,
                "  {}",
                style.paint(&printable(&rule.to_string()), Tone::Bad)
            );
        }
    }
    list(&mut out, "Objects added", &review.objects_added);
    list(&mut out, "Objects removed", &review.objects_removed);
    if !review.deployment.is_empty() {
        let _ = writeln!(out, "\nDeployment flux-operator");
        for change in &review.deployment {
            let _ = writeln!(
                out,
                "  {}:\n    - {}\n    + {}",
                change.field,
                printable(&change.before.to_string()),
                printable(&change.after.to_string())
            );
        }
    }
    list(
        &mut out,
        "Flux distributions added",
        &review.distributions_added,
    );
    list(
        &mut out,
        "Flux distributions removed",
        &review.distributions_removed,
    );
    out
}
