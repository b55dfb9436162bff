//! What the credential cache keys on, reuses, and refuses to read.

use secrecy::SecretString;

use super::*;

fn cert_user(data: &str) -> AuthInfo {
    AuthInfo {
        client_certificate_data: Some(data.to_owned()),
        client_key_data: Some(SecretString::from("key".to_owned())),
        ..AuthInfo::default()
    }
}

#[test]
fn a_key_changes_with_everything_that_makes_another_credential() {
    let cluster = ClusterIdentity::new("https://a:6443", Some(&[b"ca".to_vec()]));
    let user = cert_user("cert");
    let key = |kind, cluster: &ClusterIdentity, user: &AuthInfo, ns, sa, aud| {
        CacheKey::new(kind, cluster, user, ns, sa, aud)
    };
    let base = key(CredentialKind::Token, &cluster, &user, "ns", "sa", "aud");
    assert_eq!(
        base,
        key(CredentialKind::Token, &cluster, &user, "ns", "sa", "aud")
    );
    let others = [
        key(CredentialKind::Identity, &cluster, &user, "ns", "sa", "aud"),
        key(
            CredentialKind::Token,
            &ClusterIdentity::new("https://b:6443", Some(&[b"ca".to_vec()])),
            &user,
            "ns",
            "sa",
            "aud",
        ),
        key(
            CredentialKind::Token,
            &ClusterIdentity::new("https://a:6443", Some(&[b"other-ca".to_vec()])),
            &user,
            "ns",
            "sa",
            "aud",
        ),
        key(
            CredentialKind::Token,
            &cluster,
            &cert_user("other"),
            "ns",
            "sa",
            "aud",
        ),
        key(CredentialKind::Token, &cluster, &user, "ns2", "sa", "aud"),
        key(CredentialKind::Token, &cluster, &user, "ns", "sa2", "aud"),
        key(CredentialKind::Token, &cluster, &user, "ns", "sa", "aud2"),
        // Field boundaries count: "ns"+"sa" is not "n"+"ssa".
        key(CredentialKind::Token, &cluster, &user, "n", "ssa", "aud"),
    ];
    for other in others {
        assert_ne!(base, other);
    }
    let name = base.file_name();
    assert!(
        name.starts_with("token-") && name.ends_with(".json"),
        "{name}"
    );
    assert!(!name.contains("cert") && !name.contains("ns"), "{name}");
}

/// Two users of one cluster under one OS account (a CI runner; `aws eks update-kubeconfig
/// --profile admin|readonly`) must never share a cached credential.
#[test]
fn users_that_differ_in_anything_that_decides_who_they_are_get_other_keys() {
    let cluster = ClusterIdentity::new("https://a:6443", Some(&[b"ca".to_vec()]));
    let key =
        |user: &AuthInfo| CacheKey::new(CredentialKind::Token, &cluster, user, "ns", "sa", "aud");
    let exec_user = |profile: &str| -> AuthInfo {
        tenantflux_core::yaml::from_str(&format!(
                "exec:\n  apiVersion: client.authentication.k8s.io/v1beta1\n  command: aws\n  \
                 args: [eks, get-token, --cluster-name, c]\n  \
                 env: [{{name: AWS_PROFILE, value: {profile}}}, {{name: AWS_REGION, value: eu-west-1}}]\n"
            ))
            .expect("an exec user")
    };
    let admin = exec_user("admin");
    assert_eq!(
        key(&admin),
        key(&exec_user("admin")),
        "the same user, the same key"
    );
    assert_ne!(
        key(&admin),
        key(&exec_user("readonly")),
        "env decides who the user is"
    );
    let mut other_api = exec_user("admin");
    other_api.exec.as_mut().unwrap().api_version = Some("client.authentication.k8s.io/v1".into());
    assert_ne!(key(&admin), key(&other_api));

    let provider = |tenant: &str| -> AuthInfo {
        tenantflux_core::yaml::from_str(&format!(
                "auth-provider: {{name: oidc, config: {{client-id: k, idp-issuer-url: https://{tenant}.example}}}}\n"
            ))
            .unwrap()
    };
    assert_ne!(
        key(&provider("a")),
        key(&provider("b")),
        "auth-provider config"
    );

    let extra = |team: &str| -> AuthInfo {
        tenantflux_core::yaml::from_str(&format!(
            "token: t\nas: alice\nas-user-extra: {{team: [{team}]}}\n"
        ))
        .unwrap()
    };
    assert_ne!(key(&extra("a")), key(&extra("b")), "as-user-extra");

    // The same certificate path with other contents is another user.
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("client.crt");
    let file_user = AuthInfo {
        client_certificate: Some(cert.display().to_string()),
        client_key: Some(dir.path().join("client.key").display().to_string()),
        ..AuthInfo::default()
    };
    std::fs::write(&cert, "first").unwrap();
    let first = key(&file_user);
    std::fs::write(&cert, "second").unwrap();
    assert_ne!(first, key(&file_user), "certificate bytes, not the path");
    let token_file = |text: &str| {
        let path = dir.path().join("token");
        std::fs::write(&path, text).unwrap();
        key(&AuthInfo {
            token_file: Some(path.display().to_string()),
            ..AuthInfo::default()
        })
    };
    assert_ne!(token_file("one"), token_file("two"), "token file contents");
}

#[test]
fn reused_until_shortly_before_it_expires() {
    // 600 s token: the margin is 60 s.
    assert!(usable(1000, 1600, 1000));
    assert!(usable(1000, 1600, 1539));
    assert!(!usable(1000, 1600, 1540));
    assert!(!usable(1000, 1600, 2000));
    // 3600 s token: a tenth, 360 s.
    assert!(usable(0, 3600, 3239));
    assert!(!usable(0, 3600, 3240));
    // Issued in the future, or never valid.
    assert!(!usable(5000, 5600, 1000));
    assert!(!usable(1000, 1000, 900));
    assert!(!usable(1000, 900, 900));
    let entry = Entry::Token {
        token: "t".into(),
        issued_at: 1000,
        expires_at: 1600,
    };
    assert!(entry.usable(1200) && !entry.usable(1590));
}

#[test]
fn files_others_may_read_or_own_are_refused() {
    let me = 1000;
    assert_eq!(refusal(false, true, 0o100600, me, me, false), None);
    assert_eq!(refusal(true, false, 0o040700, me, me, true), None);
    let loose = refusal(false, true, 0o100644, me, me, false).unwrap();
    assert!(loose.contains("0644") && loose.contains("0600"), "{loose}");
    let group = refusal(true, false, 0o040750, me, me, true).unwrap();
    assert!(group.contains("0750") && group.contains("0700"), "{group}");
    let other = refusal(false, true, 0o100600, 0, me, false).unwrap();
    assert!(
        other.contains("uid 0") && other.contains("uid 1000"),
        "{other}"
    );
    // A symbolic link (neither file nor directory in symlink_metadata) or the wrong type.
    assert!(refusal(false, false, 0o120777, me, me, false).is_some());
    assert!(refusal(true, false, 0o040700, me, me, false).is_some());
    assert!(refusal(false, true, 0o100600, me, me, true).is_some());
}

#[test]
fn entries_never_show_their_secret() {
    let token = Entry::Token {
        token: "s3cr3t".into(),
        issued_at: 1,
        expires_at: 2,
    };
    let identity = Entry::Identity {
        csr: "tenantflux-caller-00".into(),
        key_pem: "s3cr3t-key".into(),
        issued_at: 1,
        expires_at: 2,
    };
    assert!(!format!("{token:?}{identity:?}").contains("s3cr3t"));
}

#[cfg(unix)]
#[test]
fn stored_files_are_0600_in_a_0700_directory_and_loose_ones_are_not_used() {
    use std::os::unix::fs::PermissionsExt as _;
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("tenantflux").join("tokens");
    let cache = CredentialCache::open(&dir).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&dir), 0o700);
    let key = CacheKey::new(
        CredentialKind::Token,
        &ClusterIdentity::new("https://a", None),
        &AuthInfo::default(),
        "ns",
        "sa",
        "aud",
    );
    assert_eq!(cache.load(&key), None);
    let entry = Entry::Token {
        token: "t".into(),
        issued_at: 1,
        expires_at: 2,
    };
    cache.store(&key, &entry);
    assert_eq!(mode(&cache.path(&key)), 0o600);
    assert_eq!(cache.load(&key), Some(entry.clone()));
    // Replaced whole: no temporary file is left behind.
    cache.store(&key, &entry);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);

    std::fs::set_permissions(cache.path(&key), std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(cache.load(&key), None, "a file others may read is not used");
    cache.store(&key, &entry);
    assert_eq!(mode(&cache.path(&key)), 0o600, "and is replaced");

    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(CredentialCache::open(&dir).is_none());
    cache.remove(&key);
}

#[test]
fn the_cache_lives_in_the_users_own_cache_directory_on_each_platform() {
    let os = |s: &str| Some(std::ffi::OsString::from(s));
    // XDG_CACHE_HOME first, when absolute, on every platform.
    assert_eq!(
        dir_from(os("/x/cache"), os("/home/u"), None, false),
        Some(PathBuf::from("/x/cache/tenantflux/tokens"))
    );
    assert_eq!(
        dir_from(os("relative"), os("/home/u"), None, false),
        Some(PathBuf::from("/home/u/.cache/tenantflux/tokens"))
    );
    // Windows: %LOCALAPPDATA%, never HOME (which Git Bash or MSYS may set to anything).
    let local = if cfg!(windows) {
        r"C:\Users\u\AppData\Local"
    } else {
        "/c/Users/u/AppData/Local"
    };
    assert_eq!(
        dir_from(None, os("/home/u"), os(local), true),
        Some(PathBuf::from(local).join("tenantflux").join("tokens"))
    );
    assert_eq!(dir_from(None, os("/home/u"), None, true), None);
    assert_eq!(dir_from(None, None, None, false), None);
}
