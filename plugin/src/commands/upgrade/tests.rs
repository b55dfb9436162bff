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
