//! The release tables of `tenantflux_core::releases` against the Flux distributions of the
//! flux-operator the tests build: every distribution its source ships is known, and for every
//! Flux kind the served and storage versions are those of the CRDs in that distribution. The
//! same distributions, packed as flux-operator packs its manifests artifact, give the agent's
//! derived release list, which must agree with the table. No cluster: the manifests are read
//! from the flux-operator source under the test cache.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use tenantflux_agent::operator::source::distributions_from_layer;
use tenantflux_core::{
    policy::Release,
    releases::{self, Releases},
};
use tenantflux_tests::tool_path;

#[derive(Deserialize)]
struct Crd {
    kind: String,
    spec: CrdSpec,
}

#[derive(Deserialize)]
struct CrdSpec {
    group: String,
    names: CrdNames,
    versions: Vec<CrdVersion>,
}

#[derive(Deserialize)]
struct CrdNames {
    kind: String,
}

#[derive(Deserialize)]
struct CrdVersion {
    name: String,
    served: bool,
    storage: bool,
}

/// `(group, kind)` → (storage version, every served version) of one distribution's CRDs.
fn crds(dir: &std::path::Path) -> BTreeMap<(String, String), (String, BTreeSet<String>)> {
    let mut out = BTreeMap::new();
    for file in std::fs::read_dir(dir).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let documents = tenantflux_core::yaml::documents::<serde_json::Value>(&text)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        for value in documents {
            if value.get("kind").and_then(|k| k.as_str()) != Some("CustomResourceDefinition") {
                continue;
            }
            let crd: Crd = serde_json::from_value(value)
                .unwrap_or_else(|err| panic!("a CRD in {}: {err}", path.display()));
            assert_eq!(crd.kind, "CustomResourceDefinition");
            let storage = crd
                .spec
                .versions
                .iter()
                .find(|v| v.storage)
                .map(|v| v.name.clone())
                .unwrap_or_default();
            let served = crd
                .spec
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.clone())
                .collect();
            out.insert((crd.spec.group, crd.spec.names.kind), (storage, served));
        }
    }
    out
}

fn release(name: &str) -> Release {
    let mut parts = name
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse().unwrap());
    Release::new(
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    )
}

fn shipped() -> Vec<(Release, std::path::PathBuf)> {
    let data = tool_path("FLUX_OPERATOR_SRC").join("config/data/flux");
    let mut shipped: Vec<(Release, std::path::PathBuf)> = std::fs::read_dir(&data)
        .unwrap_or_else(|err| panic!("{}: {err} (run tests/env/cluster build)", data.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| (release(&p.file_name().unwrap().to_string_lossy()), p))
        .collect();
    shipped.sort();
    shipped
}

#[test]
fn the_release_tables_match_the_crds_flux_operator_ships() {
    assert_eq!(
        tool_path("FLUX_OPERATOR_VERSION").to_string_lossy(),
        releases::OPERATOR_VERSION,
        "the tables describe another flux-operator than tests/env/versions.env pins"
    );
    let shipped = shipped();
    let names: Vec<Release> = shipped.iter().map(|(r, _)| *r).collect();
    assert_eq!(names, releases::KNOWN, "releases::KNOWN");

    let embedded = Releases::embedded();
    let mut checked = 0;
    for (release, dir) in &shipped {
        let minor = embedded
            .minor(*release)
            .unwrap_or_else(|| panic!("no table for Flux {release}"));
        let crds = crds(dir);
        for kind in &minor.kinds {
            let (storage, served) = crds
                .get(&(kind.group.clone(), kind.kind.clone()))
                .unwrap_or_else(|| panic!("Flux {release} ships no CRD for {}", kind.kind));
            assert_eq!(kind.storage(), storage, "Flux {release} {}", kind.kind);
            let table: BTreeSet<String> = kind.served.iter().cloned().collect();
            assert_eq!(&table, served, "Flux {release} {} served", kind.kind);
            checked += 1;
        }
        // Every toolkit kind the distribution has is in the table.
        for (group, name) in crds.keys() {
            if group.ends_with(".toolkit.fluxcd.io") {
                assert!(
                    minor.kind(group, name).is_some() || name == "ExternalArtifact",
                    "Flux {release} ships {name} ({group}), which the table lacks"
                );
            }
        }
    }
    assert!(checked > 100, "{checked} kinds checked");
}

/// flux-operator's manifests artifact, packed as its hack/build-dist-manifests.sh lays it out
/// (`flux-operator/install.yaml`, `flux/vX.Y.Z/…`) into one gzipped tarball layer.
fn artifact_layer() -> Vec<u8> {
    let src = tool_path("FLUX_OPERATOR_SRC");
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    builder
        .append_dir_all("flux", src.join("config/data/flux"))
        .unwrap();
    let install = b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: flux-system\n";
    let mut header = tar::Header::new_gnu();
    header.set_size(install.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder
        .append_data(&mut header, "flux-operator/install.yaml", &install[..])
        .unwrap();
    builder.into_inner().unwrap().finish().unwrap()
}

#[test]
fn the_releases_derived_from_the_artifact_are_the_table_and_follow_the_operator() {
    let layer = artifact_layer();
    let files = distributions_from_layer(&layer);
    let derived = Releases::from_distributions(
        "the artifact",
        files.iter().map(|(p, t)| (p.as_str(), t.as_str())),
    )
    .unwrap();
    // Every distribution the operator ships, whatever the table says.
    let names: Vec<Release> = shipped().iter().map(|(r, _)| *r).collect();
    assert_eq!(derived.releases, names);
    // The table agrees with what is derived, kind by kind and minor by minor.
    let embedded = Releases::embedded();
    assert_eq!(derived.releases, embedded.releases);
    for minor in &embedded.minors {
        let from_artifact = derived
            .minor(Release::new(2, minor.minor, 0))
            .unwrap_or_else(|| panic!("the artifact has no Flux 2.{}", minor.minor));
        assert_eq!(from_artifact.kubernetes_minimum, minor.kubernetes_minimum);
        for kind in &minor.kinds {
            let got = from_artifact
                .kind(&kind.group, &kind.kind)
                .unwrap_or_else(|| panic!("2.{}: no {} in the artifact", minor.minor, kind.kind));
            assert_eq!(
                got.storage(),
                kind.storage(),
                "2.{} {}",
                minor.minor,
                kind.kind
            );
            let a: BTreeSet<&String> = got.served.iter().collect();
            let b: BTreeSet<&String> = kind.served.iter().collect();
            assert_eq!(a, b, "2.{} {} served", minor.minor, kind.kind);
        }
        // What the artifact has beyond the table: kinds no Flux release removed a version of.
        for kind in &from_artifact.kinds {
            if minor.kind(&kind.group, &kind.kind).is_none() {
                assert!(
                    ["ExternalArtifact", "ArtifactGenerator"].contains(&kind.kind.as_str()),
                    "2.{}: {} ({}) is in the artifact but not the table",
                    minor.minor,
                    kind.kind,
                    kind.group
                );
            }
        }
    }
    // Every patch of a minor serves what its newest patch does (the derivation reads only
    // the newest).
    for (release, dir) in shipped() {
        let crds = crds(&dir);
        let minor = derived.minor(release).unwrap();
        for kind in &minor.kinds {
            let (storage, served) = &crds[&(kind.group.clone(), kind.kind.clone())];
            assert_eq!(storage, kind.storage(), "Flux {release} {}", kind.kind);
            let derived: BTreeSet<String> = kind.served.iter().cloned().collect();
            assert_eq!(&derived, served, "Flux {release} {}", kind.kind);
        }
    }
}
