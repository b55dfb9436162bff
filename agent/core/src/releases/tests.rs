//! The release table, and releases derived from distribution files.

use super::*;

#[test]
fn every_kind_of_the_release_table_is_in_the_kind_table() {
    for minor in MINORS {
        for kind in minor.kinds {
            assert!(
                crate::kinds::KINDS
                    .iter()
                    .any(|k| k.group == kind.group && k.kind == kind.kind),
                "2.{} lists {}/{}, which crate::kinds does not",
                minor.minor,
                kind.group,
                kind.kind
            );
        }
    }
}

fn range(text: &str) -> Range {
    Range::parse(text).unwrap()
}

#[test]
fn every_known_release_has_a_table_and_the_list_is_sorted() {
    let embedded = Releases::embedded();
    for release in KNOWN {
        assert!(embedded.minor(*release).is_some(), "{release}");
    }
    assert!(KNOWN.windows(2).all(|w| w[0] < w[1]));
    for m in MINORS {
        assert_eq!(m.kinds.len(), 13, "2.{}", m.minor);
    }
    assert_eq!(embedded.span(), "2.2.3 … 2.9.5");
    assert!(embedded.source.contains(OPERATOR_VERSION));
}

#[test]
fn removals_are_where_flux_made_them() {
    let embedded = Releases::embedded();
    let at = |minor: u64, group: &str, kind: &str| {
        embedded
            .minor(Release::new(2, minor, 0))
            .unwrap()
            .kind(group, kind)
            .unwrap()
            .clone()
    };
    // 2.7 removed every v1beta1/v2beta1.
    assert!(at(6, SOURCE, "GitRepository").serves("v1beta1"));
    assert!(!at(7, SOURCE, "GitRepository").serves("v1beta1"));
    assert!(!at(7, HELM, "HelmRelease").serves("v2beta1"));
    // 2.8 removed source and kustomize v1beta2 and helm v2beta2.
    assert!(at(7, SOURCE, "OCIRepository").serves("v1beta2"));
    assert!(!at(8, SOURCE, "OCIRepository").serves("v1beta2"));
    assert!(!at(8, KUSTOMIZE, "Kustomization").serves("v1beta2"));
    assert!(!at(8, HELM, "HelmRelease").serves("v2beta2"));
    assert!(at(8, NOTIFICATION, "Alert").serves("v1beta2"));
    // 2.9 removed notification and image v1beta2.
    assert!(!at(9, NOTIFICATION, "Alert").serves("v1beta2"));
    assert!(!at(9, IMAGE, "ImagePolicy").serves("v1beta2"));
    // Storage versions moved: OCIRepository to v1 in 2.6, image kinds to v1 in 2.7.
    assert_eq!(at(5, SOURCE, "OCIRepository").storage(), "v1beta2");
    assert_eq!(at(6, SOURCE, "OCIRepository").storage(), "v1");
    assert_eq!(at(6, IMAGE, "ImageUpdateAutomation").storage(), "v1beta2");
    assert_eq!(at(7, IMAGE, "ImageUpdateAutomation").storage(), "v1");
    assert_eq!(at(2, HELM, "HelmRelease").storage(), "v2beta2");
    assert_eq!(at(3, HELM, "HelmRelease").storage(), "v2");
}

#[test]
fn kubernetes_minimums() {
    let embedded = Releases::embedded();
    let min = |m: u64| {
        embedded
            .minor(Release::new(2, m, 0))
            .unwrap()
            .kubernetes_minimum
    };
    assert_eq!(
        (2..=9).map(min).collect::<Vec<_>>(),
        [26, 28, 28, 30, 31, 32, 33, 33]
    );
    assert!(embedded.minor(Release::new(2, 10, 0)).is_none());
    assert!(embedded.minor(Release::new(3, 8, 0)).is_none());
    // A minor newer than the policy names needs at least the newest minimum.
    assert_eq!(kubernetes_minimum(10), 33);
    assert_eq!(kubernetes_minimum(1), 26);
}

#[test]
fn ranges_resolve_to_the_highest_known_patch_inside_the_policy() {
    let embedded = Releases::embedded();
    let resolve = |requested: &str, allowed: Option<&str>| {
        embedded.resolve(&range(requested), allowed.map(range).as_ref())
    };
    let r = Release::new;
    assert_eq!(resolve("2.8.x", None), Some(r(2, 8, 8)));
    assert_eq!(resolve("2.8.4", None), None, "2.8.4 was never shipped");
    assert_eq!(resolve("2.x", None), Some(r(2, 9, 5)));
    assert_eq!(resolve("2.x", Some(">=2.7.0 <2.9.0")), Some(r(2, 8, 8)));
    assert_eq!(resolve("2.9.x", Some("<2.9.0")), None);
    assert_eq!(resolve("2.10.x", None), None);
}

fn crd(group: &str, kind: &str, versions: &[(&str, bool, bool)]) -> String {
    let mut text = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {}s.{group}\nspec:\n  group: {group}\n  names:\n    kind: {kind}\n  versions:\n",
        kind.to_ascii_lowercase()
    );
    for (name, served, storage) in versions {
        text.push_str(&format!(
                "  - name: {name}\n    served: {served}\n    storage: {storage}\n    schema: {{openAPIV3Schema: {{type: object}}}}\n"
            ));
    }
    text
}

/// A small artifact: two 2.8 patches, one 2.9, one 2.10 the table has never heard of,
/// and files that are no distribution.
fn fixture() -> Vec<(String, String)> {
    let deployment =
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: source-controller\n";
    let source_2_8 = crd(
        SOURCE,
        "GitRepository",
        &[("v1", true, true), ("v1beta2", false, false)],
    );
    let notification_2_8 = crd(
        NOTIFICATION,
        "Alert",
        &[("v1beta2", true, false), ("v1beta3", true, true)],
    );
    let notification_2_9 = crd(NOTIFICATION, "Alert", &[("v1beta3", true, true)]);
    let notification_2_10 = crd(
        NOTIFICATION,
        "Alert",
        &[("v1", true, true), ("v1beta3", true, false)],
    );
    [
        ("flux-operator/install.yaml", "kind: Namespace\n".to_owned()),
        (
            "flux/v2.8.0/source-controller.yaml",
            format!("{source_2_8}{deployment}"),
        ),
        (
            "flux/v2.8.0/notification-controller.yaml",
            notification_2_8.clone(),
        ),
        (
            "./flux/v2.8.8/source-controller.yaml",
            format!("{source_2_8}{deployment}"),
        ),
        (
            "./flux/v2.8.8/notification-controller.yaml",
            notification_2_8,
        ),
        ("flux/v2.9.0/notification-controller.yaml", notification_2_9),
        (
            "flux/v2.10.0/notification-controller.yaml",
            notification_2_10,
        ),
        ("flux-images/v2.9.0.yaml", "images: []\n".to_owned()),
        ("flux/latest/x.yaml", "a: b\n".to_owned()),
    ]
    .into_iter()
    .map(|(p, t)| (p.to_owned(), t))
    .collect()
}

fn derive(files: &[(String, String)]) -> Result<Releases, DistributionError> {
    Releases::from_distributions(
        "artifact",
        files.iter().map(|(p, t)| (p.as_str(), t.as_str())),
    )
}

#[test]
fn an_artifacts_distributions_give_the_releases_and_their_api_versions() {
    let releases = derive(&fixture()).unwrap();
    let r = Release::new;
    assert_eq!(releases.source, "artifact");
    assert_eq!(
        releases.releases,
        [r(2, 8, 0), r(2, 8, 8), r(2, 9, 0), r(2, 10, 0)]
    );
    assert_eq!(releases.span(), "2.8.0 … 2.10.0");
    let alert = |minor: u64| {
        releases
            .minor(r(2, minor, 0))
            .unwrap()
            .kind(NOTIFICATION, "Alert")
            .unwrap()
            .clone()
    };
    // Storage first, then the other served versions; unserved versions left out.
    assert_eq!(alert(8).served, ["v1beta3", "v1beta2"]);
    assert_eq!(alert(9).served, ["v1beta3"]);
    assert_eq!(alert(10).storage(), "v1");
    assert!(alert(10).serves("v1beta3"));
    let git = releases
        .minor(r(2, 8, 3))
        .unwrap()
        .kind(SOURCE, "GitRepository")
        .unwrap();
    assert_eq!(git.served, ["v1"]);
    // A minor the artifact has no CRD of for a kind: the planner sees no such kind.
    assert!(
        releases
            .minor(r(2, 9, 0))
            .unwrap()
            .kind(SOURCE, "GitRepository")
            .is_none()
    );
    // Kubernetes minimums come from Flux's policy, newer minors at least the newest.
    assert_eq!(releases.minor(r(2, 8, 0)).unwrap().kubernetes_minimum, 33);
    assert_eq!(releases.minor(r(2, 10, 0)).unwrap().kubernetes_minimum, 33);
    // The release list resolves ranges, 2.10 included, without a code change.
    assert_eq!(releases.resolve(&range("2.x"), None), Some(r(2, 10, 0)));
    assert_eq!(releases.resolve(&range("2.8.x"), None), Some(r(2, 8, 8)));
}

#[test]
fn artifacts_without_distributions_or_with_broken_crds_are_refused() {
    let err = derive(&[(
        "flux-operator/install.yaml".into(),
        "kind: Namespace\n".into(),
    )])
    .unwrap_err();
    assert_eq!(err, DistributionError::Empty);
    assert!(err.to_string().contains("flux/vX.Y.Z/"), "{err}");
    let broken = derive(&[("flux/v2.9.0/a.yaml".into(), "kind: [unclosed\n".into())]).unwrap_err();
    assert!(
        broken.to_string().starts_with("flux/v2.9.0/a.yaml: "),
        "{broken}"
    );
    let no_storage = crd(SOURCE, "Bucket", &[("v1", true, false)]);
    let err = derive(&[("flux/v2.9.0/a.yaml".into(), no_storage)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "flux/v2.9.0/a.yaml: CRD buckets.source.toolkit.fluxcd.io has no storage version"
    );
    let err = derive(&[("flux/v2.9.0/a.yaml".into(), "kind: Namespace\n".into())]).unwrap_err();
    assert_eq!(err.to_string(), "Flux 2.9.0 ships no CRD");
}

#[test]
fn only_flux_version_directories_are_releases() {
    assert_eq!(
        release_of("flux/v2.9.4/a.yaml"),
        Some(Release::new(2, 9, 4))
    );
    assert_eq!(
        release_of("./flux/v2.10.0/a.yaml"),
        Some(Release::new(2, 10, 0))
    );
    assert_eq!(release_of("flux/v2.9.4/"), None);
    assert_eq!(release_of("flux/2.9.4/a.yaml"), None);
    assert_eq!(release_of("flux/v2.9/a.yaml"), None);
    assert_eq!(release_of("flux/v2.9.4.1/a.yaml"), None);
    assert_eq!(release_of("flux-images/v2.9.4/a.yaml"), None);
}
