//! The release tables of `tenantflux_core::releases` against the Flux distributions of the
//! flux-operator the tests build: every distribution its source ships is known, and for every
//! Flux kind the served and storage versions are those of the CRDs in that distribution.
//! No cluster: the manifests are read from the flux-operator source under the test cache.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use tenantflux_core::{policy::Release, releases};
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

#[test]
fn the_release_tables_match_the_crds_flux_operator_ships() {
    assert_eq!(
        tool_path("FLUX_OPERATOR_VERSION").to_string_lossy(),
        releases::OPERATOR_VERSION,
        "the tables describe another flux-operator than tests/env/versions.env pins"
    );
    let data = tool_path("FLUX_OPERATOR_SRC").join("config/data/flux");
    let mut shipped: Vec<(Release, std::path::PathBuf)> = std::fs::read_dir(&data)
        .unwrap_or_else(|err| panic!("{}: {err} (run tests/env/cluster build)", data.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| (release(&p.file_name().unwrap().to_string_lossy()), p))
        .collect();
    shipped.sort();
    let names: Vec<Release> = shipped.iter().map(|(r, _)| *r).collect();
    assert_eq!(names, releases::KNOWN, "releases::KNOWN");

    let mut checked = 0;
    for (release, dir) in &shipped {
        let minor =
            releases::minor(*release).unwrap_or_else(|| panic!("no table for Flux {release}"));
        let crds = crds(dir);
        for kind in minor.kinds {
            let (storage, served) = crds
                .get(&(kind.group.to_owned(), kind.kind.to_owned()))
                .unwrap_or_else(|| panic!("Flux {release} ships no CRD for {}", kind.kind));
            assert_eq!(kind.storage(), storage, "Flux {release} {}", kind.kind);
            let table: BTreeSet<String> = kind.served.iter().map(|v| (*v).to_owned()).collect();
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
