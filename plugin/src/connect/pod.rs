//! Which pod is the agent's: running and Ready, newest first, run as the agent's ServiceAccount
//! and controlled by its Deployment's ReplicaSet; and the port its gRPC listens on.

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, ReplicaSet},
        core::v1::Pod,
    },
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{Api, Client};

use super::*;

/// The pods a port-forward may go to: Running, Ready, not terminating; newest first.
pub fn ready_agent_pods(pods: &[Pod]) -> Vec<&Pod> {
    let mut ready: Vec<&Pod> = pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            let Some(status) = &pod.status else {
                return false;
            };
            let running = status.phase.as_deref() == Some("Running");
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            running && ready
        })
        .collect();
    let created = |pod: &Pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    ready.sort_by(|a, b| {
        created(b)
            .cmp(&created(a))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    ready
}

/// The name of the ReplicaSet that controls `pod`, if a ReplicaSet does.
pub fn controlling_replica_set(pod: &Pod) -> Option<&str> {
    controller(&pod.metadata.owner_references, "ReplicaSet").map(|owner| owner.name.as_str())
}

fn controller<'a>(
    owners: &'a Option<Vec<OwnerReference>>,
    kind: &str,
) -> Option<&'a OwnerReference> {
    owners
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .filter(|owner| owner.kind == kind && owner.api_version == "apps/v1")
}

/// Whether `pod` is tenantflux-agent's, so that a credential may be sent to it: it runs as
/// ServiceAccount tenantflux-agent, and its controller is a ReplicaSet (`replica_set`, as
/// read from the API server) whose controller is Deployment tenantflux-agent (`deployment`).
/// The agent's labels alone prove nothing: whoever may create a pod sets them. Err says why
/// not, in words for the user.
pub fn check_agent_pod(
    pod: &Pod,
    replica_set: Option<&ReplicaSet>,
    deployment: Option<&Deployment>,
) -> Result<(), String> {
    let spec = pod.spec.as_ref();
    let account = spec
        .and_then(|s| s.service_account_name.as_deref())
        .unwrap_or("default");
    if account != AGENT_SERVICE_ACCOUNT {
        return Err(format!(
            "it runs as ServiceAccount {account}, not {AGENT_SERVICE_ACCOUNT}"
        ));
    }
    let Some(owner) = controller(&pod.metadata.owner_references, "ReplicaSet") else {
        return Err(format!(
            "it was not created by a ReplicaSet of Deployment {AGENT_DEPLOYMENT}"
        ));
    };
    let Some(replica_set) = replica_set.filter(|rs| rs.metadata.uid.as_deref() == Some(&owner.uid))
    else {
        return Err(format!(
            "its ReplicaSet {} does not exist (or is another one by that name)",
            owner.name
        ));
    };
    let of_deployment = controller(&replica_set.metadata.owner_references, "Deployment")
        .filter(|owner| owner.name == AGENT_DEPLOYMENT);
    let (Some(rs_owner), Some(deployment)) = (of_deployment, deployment) else {
        return Err(format!(
            "its ReplicaSet {} does not belong to Deployment {AGENT_DEPLOYMENT}",
            owner.name
        ));
    };
    if deployment.metadata.uid.as_deref() != Some(&rs_owner.uid) {
        return Err(format!(
            "its ReplicaSet {} belongs to an earlier Deployment {AGENT_DEPLOYMENT}, since deleted",
            owner.name
        ));
    }
    Ok(())
}

/// The pod's container port named `grpc`, or the agent's default port.
pub fn grpc_port(pod: &Pod) -> u16 {
    pod.spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .flat_map(|container| container.ports.iter().flatten())
        .find(|port| port.name.as_deref() == Some("grpc"))
        .and_then(|port| u16::try_from(port.container_port).ok())
        .unwrap_or(DEFAULT_GRPC_PORT)
}

fn read_error(namespace: &str) -> impl Fn(kube::Error) -> ConnectError + '_ {
    move |err| match err {
        kube::Error::Api(status) if status.is_forbidden() => ConnectError::CheckPodsForbidden {
            namespace: namespace.to_owned(),
            message: status.message.clone(),
        },
        err => ConnectError::CheckPods {
            namespace: namespace.to_owned(),
            cause: describe(&err),
        },
    }
}

/// The agent's Deployment, read while its pods are listed.
pub(super) async fn agent_deployment(
    client: Client,
    namespace: &str,
) -> Result<Option<Deployment>, ConnectError> {
    Api::<Deployment>::namespaced(client, namespace)
        .get_opt(AGENT_DEPLOYMENT)
        .await
        .map_err(read_error(namespace))
}

/// The newest of `candidates` that is tenantflux-agent's ([`check_agent_pod`]). Pods with the
/// agent's labels that are not its are named: in a warning when the agent's pod is there
/// too, in the error when it is not.
pub(super) async fn checked_agent_pod<'a>(
    client: Client,
    namespace: &str,
    candidates: &[&'a Pod],
    deployment: Option<&Deployment>,
) -> Result<&'a Pod, ConnectError> {
    let read_error = read_error(namespace);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client, namespace);
    let mut refused = Vec::new();
    for &pod in candidates {
        let replica_set = match controlling_replica_set(pod) {
            Some(name) => replica_sets.get_opt(name).await.map_err(&read_error)?,
            None => None,
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        match check_agent_pod(pod, replica_set.as_ref(), deployment) {
            Ok(()) => {
                for (other, why) in &refused {
                    eprintln!(
                        "warning: ignored pod {other} in namespace {namespace}: it has the agent's labels, but {why}"
                    );
                }
                return Ok(pod);
            }
            Err(why) => refused.push((name, why)),
        }
    }
    Err(ConnectError::NotTheAgent {
        namespace: namespace.to_owned(),
        refused: refused
            .iter()
            .map(|(name, why)| format!("pod {name}: {why}"))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::core::v1::{Container, ContainerPort, PodCondition, PodSpec, PodStatus},
        apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
        jiff::Timestamp,
    };

    use super::*;

    fn pod(name: &str, created: i64, phase: &str, ready: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.to_owned()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".to_owned(),
                    status: ready.to_owned(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn names<'a>(pods: &[&'a Pod]) -> Vec<&'a str> {
        pods.iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect()
    }

    #[test]
    fn candidates_are_the_running_ready_pods_newest_first() {
        let pods = vec![
            pod("old", 100, "Running", "True"),
            pod("new", 300, "Running", "True"),
            pod("mid", 200, "Running", "True"),
        ];
        assert_eq!(names(&ready_agent_pods(&pods)), ["new", "mid", "old"]);
    }

    #[test]
    fn skips_pods_that_are_not_running_ready_or_are_terminating() {
        let mut terminating = pod("terminating", 900, "Running", "True");
        terminating.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(950).unwrap()));
        let pods = vec![
            pod("pending", 800, "Pending", "False"),
            pod("unready", 700, "Running", "False"),
            pod("unknown", 600, "Running", "Unknown"),
            terminating,
            pod("good", 100, "Running", "True"),
        ];
        assert_eq!(names(&ready_agent_pods(&pods)), ["good"]);
        assert!(ready_agent_pods(&pods[..4]).is_empty());
        assert!(ready_agent_pods(&[]).is_empty());
        let no_status = Pod {
            status: None,
            ..pod("bare", 1, "Running", "True")
        };
        assert!(ready_agent_pods(&[no_status]).is_empty());
    }

    fn owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }

    /// The agent's pod as the Deployment's ReplicaSet creates it, with that ReplicaSet and
    /// Deployment.
    fn agent_pod() -> (Pod, ReplicaSet, Deployment) {
        let mut pod = pod("tenantflux-agent-7d9f-x2x", 1, "Running", "True");
        pod.spec = Some(PodSpec {
            service_account_name: Some("tenantflux-agent".to_owned()),
            ..PodSpec::default()
        });
        pod.metadata.owner_references =
            Some(vec![owner("ReplicaSet", "tenantflux-agent-7d9f", "rs-uid")]);
        let replica_set = ReplicaSet {
            metadata: ObjectMeta {
                name: Some("tenantflux-agent-7d9f".to_owned()),
                uid: Some("rs-uid".to_owned()),
                owner_references: Some(vec![owner("Deployment", "tenantflux-agent", "deploy-uid")]),
                ..ObjectMeta::default()
            },
            ..ReplicaSet::default()
        };
        let deployment = Deployment {
            metadata: ObjectMeta {
                name: Some("tenantflux-agent".to_owned()),
                uid: Some("deploy-uid".to_owned()),
                ..ObjectMeta::default()
            },
            ..Deployment::default()
        };
        (pod, replica_set, deployment)
    }

    #[test]
    fn the_agents_pod_runs_as_its_account_and_belongs_to_its_deployment() {
        let (pod, rs, deployment) = agent_pod();
        assert_eq!(check_agent_pod(&pod, Some(&rs), Some(&deployment)), Ok(()));
        assert_eq!(controlling_replica_set(&pod), Some("tenantflux-agent-7d9f"));
    }

    #[test]
    fn a_pod_with_the_agents_labels_only_is_refused_with_the_reason() {
        let (agent, rs, deployment) = agent_pod();
        let refused = |pod: &Pod, rs: Option<&ReplicaSet>, deployment: Option<&Deployment>| {
            check_agent_pod(pod, rs, deployment).unwrap_err()
        };

        let mut other_account = agent.clone();
        other_account.spec.as_mut().unwrap().service_account_name = Some("default".to_owned());
        assert_eq!(
            refused(&other_account, Some(&rs), Some(&deployment)),
            "it runs as ServiceAccount default, not tenantflux-agent"
        );
        let no_account = Pod {
            spec: None,
            ..agent.clone()
        };
        assert!(refused(&no_account, Some(&rs), Some(&deployment)).contains("default"));

        let mut bare = agent.clone();
        bare.metadata.owner_references = None;
        assert_eq!(
            refused(&bare, Some(&rs), Some(&deployment)),
            "it was not created by a ReplicaSet of Deployment tenantflux-agent"
        );
        // An owner that is not the controller, or a controller of another kind, is no proof.
        let mut not_controller = agent.clone();
        not_controller.metadata.owner_references.as_mut().unwrap()[0].controller = None;
        assert!(refused(&not_controller, Some(&rs), Some(&deployment)).contains("not created"));
        let mut job = agent.clone();
        job.metadata.owner_references = Some(vec![owner("Job", "tenantflux-agent", "rs-uid")]);
        assert!(refused(&job, Some(&rs), Some(&deployment)).contains("not created"));

        assert!(refused(&agent, None, Some(&deployment)).contains("does not exist"));
        let mut same_name = rs.clone();
        same_name.metadata.uid = Some("forged".to_owned());
        assert!(refused(&agent, Some(&same_name), Some(&deployment)).contains("another one"));

        let mut foreign = rs.clone();
        foreign.metadata.owner_references =
            Some(vec![owner("Deployment", "lookalike", "deploy-uid")]);
        assert_eq!(
            refused(&agent, Some(&foreign), Some(&deployment)),
            "its ReplicaSet tenantflux-agent-7d9f does not belong to Deployment tenantflux-agent"
        );
        assert!(refused(&agent, Some(&rs), None).contains("does not belong"));
        let mut recreated = deployment.clone();
        recreated.metadata.uid = Some("new-uid".to_owned());
        assert!(refused(&agent, Some(&rs), Some(&recreated)).contains("earlier Deployment"));
    }

    #[test]
    fn grpc_port_comes_from_the_named_container_port() {
        let port = |name: &str, number: i32| ContainerPort {
            name: Some(name.to_owned()),
            container_port: number,
            ..ContainerPort::default()
        };
        let mut agent = pod("a", 1, "Running", "True");
        agent.spec = Some(PodSpec {
            containers: vec![Container {
                name: "agent".to_owned(),
                ports: Some(vec![port("admin", 8080), port("grpc", 9443)]),
                ..Container::default()
            }],
            ..PodSpec::default()
        });
        assert_eq!(grpc_port(&agent), 9443);
        agent.spec.as_mut().unwrap().containers[0].ports = Some(vec![port("admin", 8080)]);
        assert_eq!(grpc_port(&agent), DEFAULT_GRPC_PORT);
        assert_eq!(
            grpc_port(&pod("b", 1, "Running", "True")),
            DEFAULT_GRPC_PORT
        );
    }
}
