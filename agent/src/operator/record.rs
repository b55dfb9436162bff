//! What the agent remembers it applied (version, digest, source, objects), kept in a ConfigMap
//! of the agent's namespace so that the next install prunes what a new bundle dropped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::{Deserialize, Serialize};

use super::bundle::ObjectRef;

/// The ConfigMap in the agent's namespace that remembers what the agent applied (version,
/// digest, source, objects), and the object the agent's install Events are about.
pub const RECORD_CONFIGMAP: &str = "tenantflux-operator-install";

/// What the agent remembers it applied, stored in [`RECORD_CONFIGMAP`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub version: String,
    pub digest: String,
    pub source: String,
    pub objects: Vec<ObjectRef>,
}

impl Record {
    pub(super) fn from_config_map(map: &ConfigMap) -> Option<Self> {
        let data = map.data.as_ref()?;
        Some(Self {
            version: data.get("version")?.clone(),
            digest: data.get("digest")?.clone(),
            source: data.get("source").cloned().unwrap_or_default(),
            objects: serde_json::from_str(data.get("objects")?).ok()?,
        })
    }

    pub(super) fn to_data(&self) -> BTreeMap<String, String> {
        [
            ("version", self.version.clone()),
            ("digest", self.digest.clone()),
            ("source", self.source.clone()),
            (
                "objects",
                serde_json::to_string_pretty(&self.objects).unwrap_or_default(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips_through_its_config_map() {
        let record = Record {
            version: "v0.58.1".into(),
            digest: "sha256:abc".into(),
            source: "configmap:bundle".into(),
            objects: vec![ObjectRef {
                api_version: "v1".into(),
                kind: "ServiceAccount".into(),
                namespace: Some("flux-system".into()),
                name: "flux-operator".into(),
            }],
        };
        let map = ConfigMap {
            data: Some(record.to_data()),
            ..ConfigMap::default()
        };
        assert_eq!(Record::from_config_map(&map), Some(record));
        assert_eq!(Record::from_config_map(&ConfigMap::default()), None);
    }
}
