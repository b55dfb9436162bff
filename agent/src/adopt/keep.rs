//! Keeping what was adopted out of Helm's hands, pure: Helm's release records (Secrets
//! `sh.helm.release.v1.NAME.vN`, key `release`: base64 of the gzipped release JSON, whose
//! `manifest` holds every object the release installed), the objects they hold, and the
//! manifest rewritten so that each object carries `helm.sh/resource-policy: keep`.
//!
//! Why both the live objects and the records: `helm upgrade` skips deleting an object it
//! dropped when the *live* object carries the annotation, while `helm uninstall` reads it from
//! the *record's* manifest (Helm 3 and 4 alike). Marking both makes either leave Flux running.

use std::io::{Read, Write};

use base64::Engine;
use serde_json::{Value, json};

/// Helm's resource policy annotation and the value that makes Helm leave an object in place.
pub const RESOURCE_POLICY: &str = "helm.sh/resource-policy";
pub const KEEP: &str = "keep";
/// The field manager of the marks, apart from the agent's other writes.
pub const FIELD_MANAGER: &str = "tenantflux-adopt";

/// One object a release's manifest holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ManifestObject {
    pub api_version: String,
    pub kind: String,
    /// Empty when the manifest names none (the release's namespace, for a namespaced kind).
    pub namespace: String,
    pub name: String,
    /// Whether the manifest already carries `helm.sh/resource-policy: keep` on it.
    pub kept: bool,
}

impl ManifestObject {
    pub fn describe(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }

    /// One line that identifies it, as the adoption's record stores it.
    pub fn key(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.api_version, self.kind, self.namespace, self.name
        )
    }

    pub fn from_key(key: &str) -> Option<Self> {
        let mut parts = key.split('|');
        let object = Self {
            api_version: parts.next()?.to_owned(),
            kind: parts.next()?.to_owned(),
            namespace: parts.next()?.to_owned(),
            name: parts.next()?.to_owned(),
            kept: false,
        };
        (parts.next().is_none() && !object.name.is_empty()).then_some(object)
    }
}

/// Where an object of an owning release stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Live {
    /// Carries `helm.sh/resource-policy: keep`.
    Marked,
    /// Exists without the mark.
    Unmarked,
    /// Does not exist (or its kind is no longer served).
    Gone,
    /// Is being deleted.
    Deleting,
    /// The agent may not read or annotate it: the tenant marks it (the record still keeps it).
    Denied,
}

/// One object of a release that owns (or owned) part of Flux.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    /// The object, its namespace resolved (empty: cluster-scoped).
    pub object: ManifestObject,
    /// `namespace/name` of the release, empty for one whose records are gone.
    pub release: String,
    pub live: Live,
}

/// What keeps adopted objects out of Helm's hands, as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    pub objects: Vec<Owned>,
    /// Records (`namespace/name`) whose manifest does not keep every object yet.
    pub records: Vec<String>,
    /// Why they could not be read, when they could not.
    pub note: String,
}

impl Marks {
    /// Whether applying would change anything.
    pub fn pending(&self) -> bool {
        !self.records.is_empty() || self.objects.iter().any(|h| h.live == Live::Unmarked)
    }

    /// One line per object, for the plan.
    pub fn lines(&self) -> Vec<String> {
        self.objects
            .iter()
            .map(|h| {
                let what = h.object.describe();
                let from = if h.release.is_empty() {
                    String::new()
                } else {
                    format!(" (release {})", h.release)
                };
                let state = match h.live {
                    Live::Marked => "marked".to_owned(),
                    Live::Unmarked => "to mark".to_owned(),
                    Live::Gone => "gone".to_owned(),
                    Live::Deleting => "being deleted".to_owned(),
                    Live::Denied => format!(
                        "the agent may not annotate it; the release's records keep it from `helm uninstall`, and `{}` keeps it from an upgrade that drops it",
                        annotate_command(&h.object, &h.object.namespace)
                    ),
                };
                format!("{what}{from}: {state}")
            })
            .collect()
    }

    /// What is wrong after an adoption, one line (empty when nothing is).
    pub fn problem(&self) -> Option<String> {
        let named = |live: Live| -> Vec<String> {
            self.objects
                .iter()
                .filter(|h| h.live == live)
                .map(|h| h.object.describe())
                .collect()
        };
        let mut parts = Vec::new();
        for (live, what) in [
            (Live::Gone, "gone"),
            (Live::Deleting, "being deleted"),
            (Live::Unmarked, "without helm.sh/resource-policy: keep"),
        ] {
            let objects = named(live);
            if !objects.is_empty() {
                parts.push(format!("{what}: {}", objects.join(", ")));
            }
        }
        if !self.records.is_empty() {
            parts.push(format!(
                "Helm release record(s) that do not keep them (written since the adoption): {}",
                self.records.join(", ")
            ));
        }
        (!parts.is_empty()).then(|| {
            format!(
                "objects adopted from Helm are at risk: {}; `helm uninstall` or `helm upgrade` of their old release may delete them: run `kubectl tenantflux adopt apply` to mark them again (what is gone must be restored first)",
                parts.join("; ")
            )
        })
    }
}

/// The release JSON a record's `release` key holds.
pub fn decode_record(data: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(data).map_err(|_| "not base64 text".to_owned())?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|err| format!("not base64: {err}"))?;
    let json = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_end(&mut out)
            .map_err(|err| format!("not gzip: {err}"))?;
        out
    } else {
        bytes
    };
    serde_json::from_slice(&json).map_err(|err| format!("not a Helm release: {err}"))
}

/// The inverse of [`decode_record`], as Helm writes it.
pub fn encode_record(release: &Value) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(release.to_string().as_bytes())
        .and_then(|()| gz.flush())
        .expect("writing to memory");
    let bytes = gz.finish().expect("writing to memory");
    base64::engine::general_purpose::STANDARD
        .encode(bytes)
        .into_bytes()
}

/// A manifest's documents, each with the comment lines Helm put before it (`# Source: …`).
fn documents(manifest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut comments = String::new();
    let mut body = String::new();
    let mut flush = |comments: &mut String, body: &mut String| {
        if !body.trim().is_empty() {
            out.push((std::mem::take(comments), std::mem::take(body)));
        } else {
            comments.clear();
            body.clear();
        }
    };
    for line in manifest.lines() {
        if line.trim_end() == "---" {
            flush(&mut comments, &mut body);
        } else if body.is_empty() && line.starts_with('#') {
            comments.push_str(line);
            comments.push('\n');
        } else {
            body.push_str(line);
            body.push('\n');
        }
    }
    flush(&mut comments, &mut body);
    out
}

fn object_of(document: &Value) -> Option<ManifestObject> {
    let metadata = document.get("metadata")?;
    Some(ManifestObject {
        api_version: document.get("apiVersion")?.as_str()?.to_owned(),
        kind: document.get("kind")?.as_str()?.to_owned(),
        namespace: metadata["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        name: metadata.get("name")?.as_str()?.to_owned(),
        kept: metadata["annotations"][RESOURCE_POLICY] == KEEP,
    })
}

/// The objects a release's manifest holds (`List` documents are not unpacked: Helm charts do
/// not render them for their own objects).
pub fn manifest_objects(manifest: &str) -> Result<Vec<ManifestObject>, String> {
    let mut objects = Vec::new();
    for (_, body) in documents(manifest) {
        let document: Value = tenantflux_core::yaml::from_str(&body)
            .map_err(|err| format!("a manifest document is not YAML: {err}"))?;
        if document.is_null() {
            continue;
        }
        objects.push(object_of(&document).ok_or_else(|| {
            format!(
                "a manifest document without apiVersion, kind or metadata.name: {}",
                body.lines().next().unwrap_or_default()
            )
        })?);
    }
    Ok(objects)
}

/// The manifest with `helm.sh/resource-policy: keep` on every object, or `None` when every
/// object carries it already. Documents keep their order and their comment lines.
pub fn keep_manifest(manifest: &str) -> Result<Option<String>, String> {
    let mut changed = false;
    let mut out = String::new();
    for (comments, body) in documents(manifest) {
        let mut document: Value = tenantflux_core::yaml::from_str(&body)
            .map_err(|err| format!("a manifest document is not YAML: {err}"))?;
        out.push_str("---\n");
        out.push_str(&comments);
        let metadata = document.get_mut("metadata").and_then(Value::as_object_mut);
        match metadata {
            Some(metadata)
                if metadata
                    .get("annotations")
                    .and_then(|a| a.get(RESOURCE_POLICY))
                    != Some(&json!(KEEP)) =>
            {
                let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
                if !annotations.is_object() {
                    *annotations = json!({});
                }
                annotations[RESOURCE_POLICY] = json!(KEEP);
                changed = true;
                let text = tenantflux_core::yaml::to_string(&document)
                    .map_err(|err| format!("writing a manifest document: {err}"))?;
                out.push_str(&text);
                if !text.ends_with('\n') {
                    out.push('\n');
                }
            }
            _ => out.push_str(&body),
        }
    }
    Ok(changed.then_some(out))
}

/// The `kubectl` command that marks an object the agent may not annotate itself.
pub fn annotate_command(object: &ManifestObject, namespace: &str) -> String {
    let kind = object.kind.to_lowercase();
    let group = object
        .api_version
        .split_once('/')
        .map(|(group, _)| format!(".{group}"))
        .unwrap_or_default();
    let ns = if namespace.is_empty() {
        String::new()
    } else {
        format!(" -n {namespace}")
    };
    format!(
        "kubectl annotate {kind}{group}{ns} {} {RESOURCE_POLICY}={KEEP}",
        object.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "---\n# Source: flux-operator/templates/crds.yaml\n\
        apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: fluxinstances.fluxcd.controlplane.io\n  annotations:\n    helm.sh/resource-policy: keep\nspec: {group: fluxcd.controlplane.io}\n\
        ---\n# Source: flux-operator/templates/deployment.yaml\n\
        apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: flux-operator\n  namespace: cozy-fluxcd\n  labels: {app.kubernetes.io/name: flux-operator}\nspec:\n  replicas: 1\n\
        ---\n# Source: flux-operator/templates/serviceaccount.yaml\n\
        apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: flux-operator\n";

    #[test]
    fn a_record_round_trips_as_helm_writes_it() {
        let release = json!({"name": "fluxcd-operator", "version": 3, "manifest": MANIFEST});
        let data = encode_record(&release);
        assert_eq!(decode_record(&data).unwrap(), release);
        // Helm before 3.0's gzip: plain base64 JSON still reads.
        let plain = base64::engine::general_purpose::STANDARD.encode(release.to_string());
        assert_eq!(decode_record(plain.as_bytes()).unwrap(), release);
        let err = decode_record(b"!!!").unwrap_err();
        assert!(err.contains("base64"), "{err}");
    }

    #[test]
    fn the_manifest_names_each_object_and_whether_helm_keeps_it() {
        let objects = manifest_objects(MANIFEST).unwrap();
        let named: Vec<(String, bool)> = objects.iter().map(|o| (o.describe(), o.kept)).collect();
        assert_eq!(
            named,
            [
                (
                    "CustomResourceDefinition fluxinstances.fluxcd.controlplane.io".into(),
                    true
                ),
                ("Deployment cozy-fluxcd/flux-operator".into(), false),
                ("ServiceAccount flux-operator".into(), false),
            ]
        );
        let key = objects[1].key();
        assert_eq!(key, "apps/v1|Deployment|cozy-fluxcd|flux-operator");
        assert_eq!(
            ManifestObject::from_key(&key).unwrap().name,
            "flux-operator"
        );
        assert!(ManifestObject::from_key("v1|Secret|ns").is_none());
    }

    #[test]
    fn keeping_marks_every_object_once_and_keeps_the_rest() {
        let kept = keep_manifest(MANIFEST)
            .unwrap()
            .expect("two objects to mark");
        let objects = manifest_objects(&kept).unwrap();
        assert_eq!(objects.len(), 3);
        assert!(objects.iter().all(|o| o.kept), "{kept}");
        // What Helm splits on and reads a file name from stays.
        assert_eq!(kept.matches("---\n# Source: ").count(), 3, "{kept}");
        let documents: Vec<Value> = tenantflux_core::yaml::documents(&kept).unwrap();
        assert_eq!(documents[1]["spec"]["replicas"], 1);
        assert_eq!(
            documents[1]["metadata"]["labels"]["app.kubernetes.io/name"],
            "flux-operator"
        );
        // The CRD, kept already, is the same text.
        assert!(
            kept.contains("spec: {group: fluxcd.controlplane.io}"),
            "{kept}"
        );
        assert_eq!(keep_manifest(&kept).unwrap(), None, "marked once");
    }

    #[test]
    fn a_broken_manifest_is_an_error_that_says_so() {
        let err = manifest_objects("---\nkind: [\n").unwrap_err();
        assert!(err.contains("not YAML"), "{err}");
        let err = manifest_objects("---\napiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert!(err.contains("metadata.name"), "{err}");
    }

    #[test]
    fn the_annotate_command_names_group_and_namespace() {
        let policy = ManifestObject {
            api_version: "networking.k8s.io/v1".into(),
            kind: "NetworkPolicy".into(),
            namespace: String::new(),
            name: "flux-operator-web".into(),
            kept: false,
        };
        assert_eq!(
            annotate_command(&policy, "cozy-fluxcd"),
            "kubectl annotate networkpolicy.networking.k8s.io -n cozy-fluxcd flux-operator-web helm.sh/resource-policy=keep"
        );
    }
}
