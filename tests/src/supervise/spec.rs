//! What the supervisor runs for a Deployment, decided without a cluster or a process: which
//! local build stands for the Deployment's image, the command line and environment it gets,
//! and whether a recorded process is kept, replaced or started again.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;

use super::Error;

/// flux-operator itself runs as a process of `tests/env/cluster flux-operator`, not of the
/// supervisor.
const OPERATOR_COMPONENT: &str = "flux-operator";

/// The controller builds this machine has (versions.env).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Builds {
    /// `COMPONENT@VERSION` entries of FLUX_CONTROLLERS: built under the cache.
    built: Vec<(String, String)>,
    /// `COMPONENT@TAG=VERSION` entries of FLUX_CONTROLLER_SUBSTITUTES: that tag runs VERSION.
    substitutes: Vec<(String, String, String)>,
}

impl Builds {
    /// From the space-separated lists of versions.env.
    pub fn parse(controllers: &str, substitutes: &str) -> Result<Builds, Error> {
        let built = controllers
            .split_whitespace()
            .map(|entry| {
                entry
                    .split_once('@')
                    .filter(|(c, v)| !c.is_empty() && !v.is_empty())
                    .map(|(c, v)| (c.to_owned(), v.to_owned()))
                    .ok_or_else(|| Error::BadControllers {
                        entry: entry.to_owned(),
                    })
            })
            .collect::<Result<_, _>>()?;
        let substitutes = substitutes
            .split_whitespace()
            .map(|entry| {
                let bad = || Error::BadSubstitutes {
                    entry: entry.to_owned(),
                };
                let (image, run) = entry.split_once('=').ok_or_else(bad)?;
                let (component, tag) = image.split_once('@').ok_or_else(bad)?;
                if [component, tag, run].iter().any(|s| s.is_empty()) {
                    return Err(bad());
                }
                Ok((component.to_owned(), tag.to_owned(), run.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Builds { built, substitutes })
    }

    /// The version to run for `component`'s image `tag`: the tag itself when it is built, or
    /// its substitute (which wins: a substitute names a tag the proxy refuses or that is not
    /// built yet).
    pub fn version_for(&self, component: &str, tag: &str) -> Option<&str> {
        let substitute = self
            .substitutes
            .iter()
            .rev()
            .find(|(c, t, _)| c == component && t == tag)
            .map(|(_, _, run)| run.as_str());
        substitute.or_else(|| {
            self.built
                .iter()
                .find(|(c, v)| c == component && v == tag)
                .map(|(_, v)| v.as_str())
        })
    }
}

/// An image reference's last path segment, as the component name, and its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Image<'a> {
    pub component: &'a str,
    pub tag: Option<&'a str>,
}

/// `ghcr.io/fluxcd/source-controller:v1.9.4@sha256:…` → `source-controller`, `v1.9.4`. A port
/// in the registry host is no tag: only the last segment is looked at.
pub fn parse_image(image: &str) -> Image<'_> {
    let reference = image.split_once('@').map_or(image, |(r, _)| r);
    let last = reference.rsplit('/').next().unwrap_or(reference);
    match last.rsplit_once(':') {
        Some((component, tag)) => Image {
            component,
            tag: Some(tag),
        },
        None => Image {
            component: last,
            tag: None,
        },
    }
}

/// Where the builds and a cluster's controller files live.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The build cache: `<cache>/<component>-<version>/<component>`.
    pub cache: PathBuf,
    /// The cluster's `controllers/` directory: per Deployment a pid, spec, log, home, storage.
    pub controllers: PathBuf,
    /// The kubeconfig the controllers use (the cluster admin's).
    pub kubeconfig: PathBuf,
    /// The namespace flux-operator rolls the controllers out in (RUNTIME_NAMESPACE).
    pub namespace: String,
}

impl Layout {
    pub fn binary(&self, component: &str, version: &str) -> PathBuf {
        self.cache
            .join(format!("{component}-{version}"))
            .join(component)
    }

    pub fn file(&self, deployment: &str, suffix: &str) -> PathBuf {
        self.controllers.join(format!("{deployment}{suffix}"))
    }
}

/// What the supervisor does about one Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// flux-operator, scaled to zero, or no container: no process.
    Nothing,
    /// A component without a local build: the pod stays without a process.
    NotBuilt {
        image: String,
    },
    Run(Process),
}

/// The process a Deployment stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub deployment: String,
    pub component: String,
    pub image: String,
    /// The image's tag, and the build run for it (another patch when substituted).
    pub tag: String,
    pub version: String,
    pub binary: PathBuf,
    /// The container's args, `$(RUNTIME_NAMESPACE)` expanded as the kubelet does.
    pub args: Vec<String>,
    /// A change of the image or the args replaces the process: the image and the container's
    /// args as the Deployment states them.
    pub fingerprint: String,
}

/// The local addresses a process serves on, in place of its pod's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub metrics: u16,
    pub health: u16,
    /// source-controller's artifact server.
    pub storage: Option<u16>,
}

/// Whether `component` serves artifacts (and so needs a storage port that outlives it).
pub fn serves_artifacts(component: &str) -> bool {
    component == "source-controller"
}

/// Decides what Deployment `deployment` asks for; `built` says whether a binary exists.
pub fn wanted(
    deployment: &Deployment,
    builds: &Builds,
    layout: &Layout,
    built: impl Fn(&Path) -> bool,
) -> Wanted {
    let name = deployment.metadata.name.clone().unwrap_or_default();
    let Some(spec) = &deployment.spec else {
        return Wanted::Nothing;
    };
    let container = spec
        .template
        .spec
        .as_ref()
        .and_then(|pod| pod.containers.first());
    let (Some(container), Some(image)) = (container, container.and_then(|c| c.image.clone()))
    else {
        return Wanted::Nothing;
    };
    let parsed = parse_image(&image);
    // A Deployment without replicas has one, as the API server defaults it.
    if parsed.component == OPERATOR_COMPONENT || spec.replicas == Some(0) {
        return Wanted::Nothing;
    }
    let version = parsed
        .tag
        .and_then(|tag| builds.version_for(parsed.component, tag))
        .filter(|version| built(&layout.binary(parsed.component, version)));
    let (Some(tag), Some(version)) = (parsed.tag, version) else {
        return Wanted::NotBuilt { image };
    };
    let raw_args = container.args.clone().unwrap_or_default();
    let fingerprint = std::iter::once(image.as_str())
        .chain(raw_args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    Wanted::Run(Process {
        deployment: name,
        component: parsed.component.to_owned(),
        tag: tag.to_owned(),
        version: version.to_owned(),
        binary: layout.binary(parsed.component, version),
        args: raw_args
            .iter()
            .map(|a| a.replace("$(RUNTIME_NAMESPACE)", &layout.namespace))
            .collect(),
        image,
        fingerprint,
    })
}

impl Process {
    /// The full command line: the Deployment's args, then flags that win over them (later
    /// flags do): leader election off, every namespace, no event sink (notification-controller
    /// does not run), and loopback addresses for what a pod serves on its own address.
    pub fn command_line(&self, layout: &Layout, ports: Ports) -> Vec<String> {
        let mut args = self.args.clone();
        args.extend([
            "--enable-leader-election=false".to_owned(),
            "--watch-all-namespaces=true".to_owned(),
            "--events-addr=".to_owned(),
            format!("--metrics-addr=127.0.0.1:{}", ports.metrics),
            format!("--health-addr=127.0.0.1:{}", ports.health),
        ]);
        if let Some(port) = ports.storage {
            let storage = layout.file(&self.deployment, "-storage");
            args.extend([
                format!("--storage-path={}", storage.display()),
                format!("--storage-addr=127.0.0.1:{port}"),
                format!("--storage-adv-addr=127.0.0.1:{port}"),
            ]);
        }
        args
    }

    /// The environment set for the process (KUBERNETES_SERVICE_* are removed: without them the
    /// controller takes the cluster from KUBECONFIG). A home of its own, so that nothing it
    /// caches (sigstore's TUF root among it) is shared.
    pub fn env(&self, layout: &Layout) -> Vec<(&'static str, PathBuf)> {
        let home = layout.file(&self.deployment, "-home");
        vec![
            ("KUBECONFIG", layout.kubeconfig.clone()),
            ("RUNTIME_NAMESPACE", PathBuf::from(&layout.namespace)),
            ("TUF_ROOT", home.join(".sigstore")),
            ("HOME", home),
        ]
    }
}

/// A process recorded for a Deployment (its pidfile and spec file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded<'a> {
    pub pid: u32,
    pub alive: bool,
    pub fingerprint: Option<&'a str>,
}

/// What to do with the process of a Deployment that wants `fingerprint` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Keep,
    Start,
    /// The Deployment changed (an upgrade's new tag, new args): stop `pid`, start the new one.
    Replace {
        pid: u32,
    },
    /// The process exited: start it again.
    Restart {
        pid: u32,
    },
}

pub fn decide(recorded: Option<Recorded<'_>>, fingerprint: &str) -> Action {
    match recorded {
        None => Action::Start,
        Some(r) if !r.alive => Action::Restart { pid: r.pid },
        Some(r) if r.fingerprint == Some(fingerprint) => Action::Keep,
        Some(r) => Action::Replace { pid: r.pid },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROLLERS: &str = "source-controller@v1.9.4 kustomize-controller@v1.9.4 \
                               source-controller@v1.7.3 kustomize-controller@v1.7.3";
    const SUBSTITUTES: &str = "source-controller@v1.7.4=v1.7.3 source-controller@v1.9.5=v1.9.4";

    fn builds() -> Builds {
        Builds::parse(CONTROLLERS, SUBSTITUTES).unwrap()
    }

    fn layout() -> Layout {
        Layout {
            cache: "/cache".into(),
            controllers: "/cluster/controllers".into(),
            kubeconfig: "/cluster/kubeconfig.yaml".into(),
            namespace: "flux-system".into(),
        }
    }

    /// A Deployment as flux-operator rolls it out, trimmed to what the supervisor reads.
    fn source_controller(image: &str, replicas: Option<i32>) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "source-controller", "namespace": "flux-system"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "source-controller"}},
                "template": {"spec": {"containers": [{
                    "name": "manager",
                    "image": image,
                    "args": [
                        "--events-addr=http://notification-controller.$(RUNTIME_NAMESPACE).svc.cluster.local./",
                        "--watch-all-namespaces=false",
                        "--no-cross-namespace-refs=true",
                    ],
                }]}},
            },
        }))
        .unwrap()
    }

    fn run(w: Wanted) -> Process {
        match w {
            Wanted::Run(p) => p,
            other => panic!("not a process: {other:?}"),
        }
    }

    #[test]
    fn images_name_their_component_and_tag() {
        let image = |component, tag| Image { component, tag };
        assert_eq!(
            parse_image("ghcr.io/fluxcd/source-controller:v1.9.4@sha256:0123abcd"),
            image("source-controller", Some("v1.9.4"))
        );
        assert_eq!(
            parse_image("localhost:5000/fluxcd/kustomize-controller"),
            image("kustomize-controller", None)
        );
        assert_eq!(
            parse_image("helm-controller:v1.4.0"),
            image("helm-controller", Some("v1.4.0"))
        );
        assert_eq!(
            parse_image("registry.example/flux-operator@sha256:ff"),
            image("flux-operator", None)
        );
    }

    #[test]
    fn a_built_tag_runs_itself_and_a_substituted_tag_its_substitute() {
        let b = builds();
        assert_eq!(b.version_for("source-controller", "v1.9.4"), Some("v1.9.4"));
        assert_eq!(b.version_for("source-controller", "v1.7.4"), Some("v1.7.3"));
        assert_eq!(b.version_for("source-controller", "v1.9.5"), Some("v1.9.4"));
        assert_eq!(b.version_for("kustomize-controller", "v1.9.5"), None);
        assert_eq!(b.version_for("helm-controller", "v1.4.0"), None);
    }

    #[test]
    fn malformed_version_lists_are_refused_naming_the_entry() {
        let err = Builds::parse("source-controller v1.9.4", "").unwrap_err();
        assert!(err.to_string().contains("\"source-controller\""), "{err}");
        let err = Builds::parse("", "source-controller@v1.7.4").unwrap_err();
        assert!(
            err.to_string().contains("source-controller@v1.7.4"),
            "{err}"
        );
        assert_eq!(Builds::parse("", "").unwrap(), Builds::default());
    }

    #[test]
    fn a_deployment_with_a_local_build_runs_it_with_its_args_expanded() {
        let image = "ghcr.io/fluxcd/source-controller:v1.7.4@sha256:aa";
        let p = run(wanted(
            &source_controller(image, None),
            &builds(),
            &layout(),
            |_| true,
        ));
        assert_eq!(p.deployment, "source-controller");
        assert_eq!(p.component, "source-controller");
        assert_eq!(p.tag, "v1.7.4");
        assert_eq!(p.version, "v1.7.3");
        assert_eq!(
            p.binary,
            Path::new("/cache/source-controller-v1.7.3/source-controller")
        );
        assert_eq!(
            p.args[0],
            "--events-addr=http://notification-controller.flux-system.svc.cluster.local./"
        );
        assert!(
            p.fingerprint
                .starts_with(&format!("{image} --events-addr=")),
            "the image and the args as stated: {}",
            p.fingerprint
        );
        assert!(p.fingerprint.contains("$(RUNTIME_NAMESPACE)"));
    }

    #[test]
    fn flux_operator_zero_replicas_and_missing_builds_run_nothing() {
        let l = layout();
        let b = builds();
        let d = source_controller("ghcr.io/fluxcd/source-controller:v1.9.4", Some(0));
        assert_eq!(wanted(&d, &b, &l, |_| true), Wanted::Nothing);
        let d = source_controller("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.59.0", None);
        assert_eq!(wanted(&d, &b, &l, |_| true), Wanted::Nothing);
        for image in [
            "ghcr.io/fluxcd/source-controller:v1.8.0",
            "ghcr.io/fluxcd/source-controller",
            "ghcr.io/fluxcd/helm-controller:v1.4.0",
        ] {
            let d = source_controller(image, Some(1));
            assert_eq!(
                wanted(&d, &b, &l, |_| true),
                Wanted::NotBuilt {
                    image: image.into()
                }
            );
        }
        // Listed in versions.env but not (yet) in the cache.
        let d = source_controller("ghcr.io/fluxcd/source-controller:v1.9.4", Some(1));
        assert!(matches!(
            wanted(&d, &b, &l, |_| false),
            Wanted::NotBuilt { .. }
        ));
    }

    #[test]
    fn later_flags_take_loopback_ports_and_source_controller_its_storage() {
        let l = layout();
        let d = source_controller("ghcr.io/fluxcd/source-controller:v1.9.4", Some(1));
        let p = run(wanted(&d, &builds(), &l, |_| true));
        let ports = Ports {
            metrics: 1001,
            health: 1002,
            storage: Some(1003),
        };
        let line = p.command_line(&l, ports);
        assert_eq!(&line[..p.args.len()], &p.args[..]);
        assert_eq!(
            &line[p.args.len()..],
            [
                "--enable-leader-election=false",
                "--watch-all-namespaces=true",
                "--events-addr=",
                "--metrics-addr=127.0.0.1:1001",
                "--health-addr=127.0.0.1:1002",
                "--storage-path=/cluster/controllers/source-controller-storage",
                "--storage-addr=127.0.0.1:1003",
                "--storage-adv-addr=127.0.0.1:1003",
            ]
        );
        let without_storage = p.command_line(
            &l,
            Ports {
                storage: None,
                ..ports
            },
        );
        assert!(!without_storage.iter().any(|a| a.starts_with("--storage")));
        assert!(serves_artifacts("source-controller"));
        assert!(!serves_artifacts("kustomize-controller"));
        let env = p.env(&l);
        assert!(env.contains(&("KUBECONFIG", "/cluster/kubeconfig.yaml".into())));
        assert!(env.contains(&("RUNTIME_NAMESPACE", "flux-system".into())));
        assert!(env.contains(&("HOME", "/cluster/controllers/source-controller-home".into())));
    }

    #[test]
    fn a_process_is_kept_replaced_on_change_and_restarted_on_exit() {
        let recorded = |alive, fingerprint| {
            Some(Recorded {
                pid: 42,
                alive,
                fingerprint,
            })
        };
        assert_eq!(decide(None, "a"), Action::Start);
        assert_eq!(decide(recorded(true, Some("a")), "a"), Action::Keep);
        assert_eq!(
            decide(recorded(true, Some("b")), "a"),
            Action::Replace { pid: 42 }
        );
        assert_eq!(
            decide(recorded(true, None), "a"),
            Action::Replace { pid: 42 }
        );
        assert_eq!(
            decide(recorded(false, Some("a")), "a"),
            Action::Restart { pid: 42 }
        );
    }
}
