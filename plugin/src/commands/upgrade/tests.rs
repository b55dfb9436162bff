use tenantflux_proto::v1 as pb;

use super::{render::*, view::*, *};
use crate::output::Style;

fn plan() -> pb::UpgradePlan {
    pb::UpgradePlan {
        requested: "2.8.x".into(),
        target: "2.8.8".into(),
        written_version: "2.8.x".into(),
        current_version: "2.6.4".into(),
        current_range: "2.6.x".into(),
        kubernetes_version: "1.36".into(),
        kubernetes_minimum: "1.33".into(),
        known_releases: "flux-operator v0.58.1".into(),
        migrations: vec![pb::CrdMigration {
            crd: "ocirepositories.source.toolkit.fluxcd.io".into(),
            kind: "OCIRepository".into(),
            stored_versions: vec!["v1beta2".into(), "v1".into()],
            storage_version: "v1".into(),
            unserved: vec!["v1beta2".into()],
            objects: 40,
        }],
        removed_api_uses: vec![pb::RemovedApiUse {
            kind: "OCIRepository".into(),
            namespace: "apps".into(),
            name: "podinfo".into(),
            api_version: "source.toolkit.fluxcd.io/v1beta2".into(),
            replacement: "source.toolkit.fluxcd.io/v1".into(),
            kustomization: "flux-system/apps".into(),
            source: "GitRepository/flux-system/fleet".into(),
            path: "./apps".into(),
            blocking: true,
            ..Default::default()
        }],
        blockers: vec![pb::Finding {
            code: "removed-api-in-git".into(),
            message: "Kustomization flux-system/apps applies …".into(),
        }],
        blocked: true,
        ..Default::default()
    }
}

#[test]
fn the_plan_table_shows_migrations_uses_and_blockers() {
    let text = render_plan(&PlanView::from(plan()), Style::PLAIN);
    for part in [
        "Upgrade Flux 2.6.4 → 2.8.8 (requested \"2.8.x\"",
        "1.36 (Flux 2.8.8 needs 1.33 or later)",
        "ocirepositories.source.toolkit.fluxcd.io   v1beta2,v1   v1beta2   v1           40",
        "OCIRepository apps/podinfo   source.toolkit.fluxcd.io/v1beta2",
        "Kustomization flux-system/apps (GitRepository/flux-system/fleet ./apps)",
        "[removed-api-in-git]",
        "Blocked: fix the blockers above",
    ] {
        assert!(text.contains(part), "{part}:\n{text}");
    }
    assert!(ensure_not_blocked(&PlanView::from(plan())).is_err());
}

#[test]
fn the_state_table_and_progress_line() {
    let view = StateView::from(pb::UpgradeState {
        present: true,
        target: "2.8.8".into(),
        from_version: "2.6.4".into(),
        phase: pb::UpgradePhase::Migrating.into(),
        message: "migrating ocirepositories.source.toolkit.fluxcd.io".into(),
        crds: vec![pb::CrdProgress {
            crd: "ocirepositories.source.toolkit.fluxcd.io".into(),
            storage_version: "v1".into(),
            total: 40,
            migrated: 10,
            ..Default::default()
        }],
        concurrency: 8,
        runs: 2,
        kustomizations: vec![pb::KustomizationHealth {
            namespace: "apps".into(),
            name: "web".into(),
            revision: "main@sha1:1".into(),
            ready_again: false,
            message: "Ready=False: kustomize build failed".into(),
        }],
        ..Default::default()
    });
    assert_eq!(
        progress_line(&view),
        "[migrating] migrating ocirepositories.source.toolkit.fluxcd.io (10/40 objects)"
    );
    let text = render_state(&view, Style::PLAIN);
    assert!(text.contains("Flux 2.6.4 → 2.8.8 (migrating)"), "{text}");
    assert!(text.contains("1 time(s) after an agent restart"), "{text}");
    assert!(text.contains("10/40"), "{text}");
    assert!(
        text.contains(
            "apps/web        main@sha1:1   no            Ready=False: kustomize build failed"
        ),
        "{text}"
    );
    let none = StateView::from(pb::UpgradeState::default());
    assert!(render_state(&none, Style::PLAIN).contains("No upgrade has run"));
}

/// A use written outside Git by `manager`, not blocking.
fn written(name: &str) -> pb::RemovedApiUse {
    pb::RemovedApiUse {
        kind: "HelmRepository".into(),
        namespace: "apps".into(),
        name: name.into(),
        api_version: "source.toolkit.fluxcd.io/v1beta2".into(),
        replacement: "source.toolkit.fluxcd.io/v1".into(),
        manager: "kubectl-client-side-apply".into(),
        ..Default::default()
    }
}

#[test]
fn the_plan_shows_every_section_in_its_colour() {
    let mut full = plan();
    full.policy = "platform generation 3".into();
    full.policy_range = ">=2.7.0 <2.10.0".into();
    full.deadline = Some(pb::UpgradeDeadline {
        minimum_version: "2.8.0".into(),
        date: "2026-09-01".into(),
        warn_days: 30,
    });
    full.removed_api_uses
        .extend((0..SHOWN_USES + 2).map(|n| written(&format!("repo-{n}"))));
    full.hidden_removed_api_uses = 3;
    full.warnings = vec![pb::Finding {
        code: "deadline".into(),
        message: "Flux 2.8.0 is due by 2026-09-01".into(),
    }];
    let mut view = PlanView::from(full);
    view.flux_cli = "2.8.8 on PATH".into();
    let text = render_plan(&view, Style { color: true });
    assert_eq!(Style::shown(&text), "\
Upgrade Flux 2.6.4 → 2.8.8 (requested \"2.8.x\"; spec.distribution.version \"2.6.x\" → \"2.8.x\")
Kubernetes:   1.36 (Flux 2.8.8 needs 1.33 or later)
Policy:       platform generation 3, versions \">=2.7.0 <2.10.0\"
Deadline:     Flux 2.8.0 or later by 2026-09-01 (warnings from 30 days before)
Releases:     as known from flux-operator v0.58.1
flux CLI:     2.8.8 on PATH

Stored versions to migrate:
  CRD                                        STORED       REMOVED   REWRITE AT   OBJECTS
  ocirepositories.source.toolkit.fluxcd.io   v1beta2,v1   <red>v1beta2</>   v1           40

Objects using API versions Flux 2.8.8 removes:
  OBJECT                       API VERSION                        USE                           FROM
  OCIRepository apps/podinfo   <red>source.toolkit.fluxcd.io/v1beta2</>   source.toolkit.fluxcd.io/v1   Kustomization flux-system/apps (GitRepository/flux-system/fleet ./apps)
  HelmRepository apps/repo-0   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  HelmRepository apps/repo-1   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  HelmRepository apps/repo-2   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  HelmRepository apps/repo-3   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  HelmRepository apps/repo-4   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  HelmRepository apps/repo-5   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  HelmRepository apps/repo-6   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  HelmRepository apps/repo-7   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  HelmRepository apps/repo-8   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  HelmRepository apps/repo-9   source.toolkit.fluxcd.io/v1beta2   source.toolkit.fluxcd.io/v1   written by kubectl-client-side-apply
  … and 2 more written outside Git (-o json lists them all)

3 more objects using API versions Flux 2.8.8 removes are in namespaces you may not list

Blockers:
  <red>•</> [removed-api-in-git] Kustomization flux-system/apps applies …

Warnings:
  • [deadline] Flux 2.8.0 is due by 2026-09-01
<red>
Blocked: fix the blockers above, then plan again.</>
");
}

#[test]
fn the_plan_of_nothing_says_so_and_is_ready_without_a_policy() {
    let view = PlanView::from(pb::UpgradePlan {
        requested: "3.x".into(),
        known_releases: "the table built into the agent".into(),
        ..Default::default()
    });
    assert_eq!(
        Style::shown(&render_plan(&view, Style { color: true })),
        "\
Upgrade to \"3.x\": nothing resolves
Policy:       none held
Releases:     as known from the table built into the agent
<green>
Ready: kubectl tenantflux upgrade apply --to \"3.x\"</>
"
    );
    let unranged = PlanView::from(pb::UpgradePlan {
        policy: "platform generation 3".into(),
        ..plan()
    });
    assert!(
        render_plan_body(&unranged, Style::PLAIN)
            .contains("\nPolicy:       platform generation 3\n")
    );
}

#[test]
fn the_state_shows_every_line_and_table_in_its_colour() {
    let view = StateView::from(pb::UpgradeState {
        present: true,
        target: "2.8.8".into(),
        from_version: String::new(),
        written_version: "2.8.x".into(),
        phase: pb::UpgradePhase::Migrating.into(),
        message: "migrating".into(),
        bumped: true,
        instance_generation: 5,
        started_at: "2026-11-30T05:00:00Z".into(),
        finished_at: "2026-11-30T05:10:00Z".into(),
        requested_by: "alice".into(),
        crds: vec![
            pb::CrdProgress {
                crd: "ocirepositories.source.toolkit.fluxcd.io".into(),
                storage_version: "v1".into(),
                total: 40,
                migrated: 40,
                done: true,
                seconds: 4.0,
                ..Default::default()
            },
            pb::CrdProgress {
                crd: "helmrepositories.source.toolkit.fluxcd.io".into(),
                storage_version: "v1".into(),
                total: 5,
                migrated: 0,
                seconds: 1.0,
                ..Default::default()
            },
        ],
        concurrency: 8,
        runs: 1,
        kustomizations: vec![
            pb::KustomizationHealth {
                namespace: "apps".into(),
                name: "web".into(),
                revision: "main@sha1:1".into(),
                ready_again: true,
                message: String::new(),
            },
            pb::KustomizationHealth {
                namespace: "apps".into(),
                name: "api".into(),
                revision: "main@sha1:2".into(),
                ready_again: false,
                message: "Ready=False".into(),
            },
        ],
        ..Default::default()
    });
    let text = render_state(&view, Style { color: true });
    assert_eq!(
        Style::shown(&text),
        "\
Upgrade:      Flux - → 2.8.8 (migrating)
Message:      migrating
Version bump: spec.distribution.version \"2.8.x\" (generation 5)
Started:      2026-11-30T05:00:00Z by alice
Finished:     2026-11-30T05:10:00Z

Storage migration (up to 8 objects at once):
  CRD                                         AT   OBJECTS   STATE     RATE
  ocirepositories.source.toolkit.fluxcd.io    v1   40/40     <green>done</>      10/s
  helmrepositories.source.toolkit.fluxcd.io   v1   0/5       pending   -

Kustomizations Ready before the version bump:
  KUSTOMIZATION   REVISION      READY AGAIN   MESSAGE
  apps/web        main@sha1:1   <green>yes</>           -
  apps/api        main@sha1:2   <red>no</>            Ready=False
"
    );
    let unbumped = StateView::from(pb::UpgradeState {
        present: true,
        target: "2.8.8".into(),
        from_version: "2.6.4".into(),
        ..Default::default()
    });
    assert_eq!(
        render_state(&unbumped, Style::PLAIN),
        "\
Upgrade:      Flux 2.6.4 → 2.8.8 (unknown)
Message:      
Version bump: not yet
Started:       by -
"
    );
}
