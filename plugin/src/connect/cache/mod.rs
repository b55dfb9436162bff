//! Credentials kept between commands, as kubectl's credential plugins keep theirs: a
//! TokenRequest token, or the name and key of a caller-identity CSR, one file per cluster,
//! kubeconfig user, namespace, ServiceAccount and audience, reused until shortly before it
//! expires. Files are mode 0600 in a 0700 directory of the user's cache directory, written
//! whole (a temporary file renamed over the old one); a file or directory that is not the
//! user's own, or that others may read, is never used. What a file holds is never printed.

use std::{
    fmt,
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use kube::config::AuthInfo;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Set (to anything but empty or `0`) to neither read nor write cached credentials
/// (`--no-credential-cache`).
pub const NO_CACHE_ENV: &str = "TENANTFLUX_NO_CREDENTIAL_CACHE";
/// A credential is not reused in the last minute of its life, nor in its last tenth: a
/// command started just before the expiry must not fail half-way, and clocks differ a little.
const MIN_MARGIN_SECONDS: i64 = 60;
/// Files older than this hold nothing usable (every credential cached lives ≤ 15 min), and are
/// removed when a new one is written.
const STALE_AFTER: Duration = Duration::from_secs(3600);

/// The cluster a kubeconfig selects, as far as a credential is concerned: its server and the
/// CA it is trusted with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdentity {
    server: String,
    ca_sha256: String,
}

impl ClusterIdentity {
    pub fn new(server: &str, root_certs: Option<&[Vec<u8>]>) -> Self {
        let mut ca = Sha256::new();
        for cert in root_certs.unwrap_or_default() {
            ca.update((cert.len() as u64).to_be_bytes());
            ca.update(cert);
        }
        Self {
            server: server.to_owned(),
            ca_sha256: hex(&ca.finalize()),
        }
    }
}

/// What a cached credential is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    Token,
    Identity,
}

/// Everything that would make another credential; a file's name is its SHA-256, so neither
/// the kubeconfig user's secrets nor names show in the directory.
#[derive(Clone, PartialEq, Eq)]
pub struct CacheKey(String);

impl CacheKey {
    pub fn new(
        kind: CredentialKind,
        cluster: &ClusterIdentity,
        user: &AuthInfo,
        namespace: &str,
        account: &str,
        audience: &str,
    ) -> Self {
        let kind = match kind {
            CredentialKind::Token => "token",
            CredentialKind::Identity => "identity",
        };
        let mut digest = Sha256::new();
        let fields = [
            "tenantflux-credential-v1",
            kind,
            &cluster.server,
            &cluster.ca_sha256,
            &user_identity(user),
            namespace,
            account,
            audience,
        ];
        for field in fields {
            digest.update((field.len() as u64).to_be_bytes());
            digest.update(field.as_bytes());
        }
        Self(format!("{kind}-{}", hex(&digest.finalize())))
    }

    fn file_name(&self) -> String {
        format!("{}.json", self.0)
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({})", self.0)
    }
}

/// Who the kubeconfig user is: a digest of the whole user entry as kube reads it (exec command,
/// args, env and apiVersion; the auth provider's name and config; tokens, certificates and keys;
/// every impersonation field, extras included; whatever kube keeps but does not model) and of
/// the files it names (certificate, key, token file: their contents, not their paths), so two
/// users that differ in anything that decides who they are never share a credential.
fn user_identity(user: &AuthInfo) -> String {
    let mut digest = Sha256::new();
    let mut add = |field: &[u8]| {
        digest.update((field.len() as u64).to_be_bytes());
        digest.update(field);
    };
    let entry = serde_json::to_value(user).unwrap_or_default();
    add(canonical(&entry).as_bytes());
    for path in [&user.client_certificate, &user.client_key, &user.token_file] {
        // An unreadable file makes a key of its own; kube then fails on it with its own error.
        match path.as_deref().map(std::fs::read) {
            Some(Ok(bytes)) => add(&bytes),
            Some(Err(_)) => add(b"\0unreadable"),
            None => add(b"\0none"),
        }
    }
    hex(&digest.finalize())
}

/// JSON with every object's keys sorted: kube keeps `env` entries and extras in hash maps,
/// whose order changes from one process to the next.
fn canonical(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let fields: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical(v)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

/// One cached credential, as stored.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Entry {
    /// A TokenRequest token.
    #[serde(rename_all = "camelCase")]
    Token {
        token: String,
        issued_at: i64,
        expires_at: i64,
    },
    /// A caller-identity CSR and its key (PKCS#8 PEM); it proves who the user is only to the
    /// agent's audience and namespace, and only while the CSR exists and is young enough.
    #[serde(rename_all = "camelCase")]
    Identity {
        csr: String,
        key_pem: String,
        issued_at: i64,
        expires_at: i64,
    },
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Token { expires_at, .. } => {
                write!(f, "Entry::Token(<redacted>, expires at {expires_at})")
            }
            Self::Identity {
                csr, expires_at, ..
            } => write!(
                f,
                "Entry::Identity({csr}, <key redacted>, expires at {expires_at})"
            ),
        }
    }
}

impl Entry {
    /// Whether the entry may still be used at `now` (seconds since the epoch).
    pub fn usable(&self, now: i64) -> bool {
        let (Self::Token {
            issued_at,
            expires_at,
            ..
        }
        | Self::Identity {
            issued_at,
            expires_at,
            ..
        }) = self;
        usable(*issued_at, *expires_at, now)
    }
}

/// Reused until `max(60 s, a tenth of its life)` before it expires, and never when it claims
/// to be issued in the future (a clock set back, or a file not written by us).
pub fn usable(issued_at: i64, expires_at: i64, now: i64) -> bool {
    let lifetime = expires_at.saturating_sub(issued_at);
    let margin = MIN_MARGIN_SECONDS.max(lifetime / 10);
    lifetime > 0 && issued_at <= now + MIN_MARGIN_SECONDS && now.saturating_add(margin) < expires_at
}

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Why a cache file or directory must not be used, from its metadata: `None` when it is a
/// `want` (file or directory, never a symbolic link) owned by `me` that no one else may read
/// or write. Unix only (mode bits and owners); compiled everywhere for its unit test.
#[cfg_attr(not(unix), allow(dead_code))]
pub fn refusal(
    is_dir: bool,
    is_file: bool,
    mode: u32,
    owner: u32,
    me: u32,
    want_dir: bool,
) -> Option<String> {
    let what = if want_dir { "directory" } else { "file" };
    if want_dir && !is_dir || !want_dir && !is_file {
        return Some(format!("it is not a plain {what}"));
    }
    if owner != me {
        return Some(format!("it belongs to uid {owner}, not to you (uid {me})"));
    }
    if mode & 0o077 != 0 {
        let want = if want_dir { "0700" } else { "0600" };
        return Some(format!(
            "its mode is {:04o}: others may use it (it must be {want})",
            mode & 0o7777
        ));
    }
    None
}

/// The directory cached credentials live in: `$XDG_CACHE_HOME/tenantflux/tokens`, else
/// `~/.cache/tenantflux/tokens`; on Windows `%LOCALAPPDATA%\tenantflux\tokens`.
pub fn default_dir() -> Option<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    dir_from(
        env("XDG_CACHE_HOME"),
        env("HOME"),
        env("LOCALAPPDATA"),
        cfg!(windows),
    )
}

/// [`default_dir`] from the environment's values, pure.
fn dir_from(
    xdg_cache_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
    local_app_data: Option<std::ffi::OsString>,
    windows: bool,
) -> Option<PathBuf> {
    let absolute = |d: std::ffi::OsString| Some(PathBuf::from(d)).filter(|d| d.is_absolute());
    let base = xdg_cache_home.and_then(absolute).or_else(|| {
        if windows {
            // The user's own profile: its inherited ACL admits the user, SYSTEM and the
            // Administrators, not other users.
            local_app_data.and_then(absolute)
        } else {
            home.map(|home| PathBuf::from(home).join(".cache"))
        }
    })?;
    Some(base.join("tenantflux").join("tokens"))
}

/// The cache directory, checked. Problems are warnings: a command never fails for its cache.
#[derive(Clone)]
pub struct CredentialCache {
    dir: PathBuf,
}

impl CredentialCache {
    /// Opens (creating it 0700 if needed) the directory; None, with a warning, when it cannot
    /// be used.
    pub fn open(dir: &Path) -> Option<Self> {
        match open_dir(dir) {
            Ok(()) => Some(Self {
                dir: dir.to_owned(),
            }),
            Err(reason) => {
                eprintln!(
                    "warning: not caching credentials in {}: {reason}",
                    dir.display()
                );
                None
            }
        }
    }

    pub fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The entry stored for `key`, if it is there, the user's own, and readable.
    pub fn load(&self, key: &CacheKey) -> Option<Entry> {
        let path = self.path(key);
        let text = match read_checked(&path) {
            Ok(Some(text)) => text,
            Ok(None) => return None,
            Err(reason) => {
                eprintln!(
                    "warning: not using the cached credential {}: {reason}; requesting a new one",
                    path.display()
                );
                return None;
            }
        };
        serde_json::from_str(&text).ok()
    }

    /// Stores `entry` for `key` atomically (a 0600 temporary file renamed over the old one).
    pub fn store(&self, key: &CacheKey, entry: &Entry) {
        let path = self.path(key);
        if let Err(err) = self.write(&path, entry) {
            eprintln!(
                "warning: could not cache the credential in {}: {err}",
                path.display()
            );
        }
        self.remove_stale();
    }

    fn write(&self, path: &Path, entry: &Entry) -> std::io::Result<()> {
        use std::io::Write as _;
        // tempfile creates the file 0600 (O_EXCL, never through a link).
        let mut file = tempfile::NamedTempFile::with_prefix_in(".tmp-", &self.dir)?;
        serde_json::to_writer(&mut file, entry)?;
        file.flush()?;
        file.as_file().sync_all()?;
        file.persist(path).map_err(|err| err.error)?;
        Ok(())
    }

    pub fn remove(&self, key: &CacheKey) {
        let _ = std::fs::remove_file(self.path(key));
    }

    /// Removes files too old to hold anything usable, so rotated kubeconfigs leave nothing
    /// behind for long.
    fn remove_stale(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| modified.elapsed().ok())
                .is_some_and(|age| age > STALE_AFTER);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(unix)]
fn open_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|err| format!("cannot create {}: {err}", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(format!("cannot create it: {err}")),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|err| err.to_string())?;
    let me = rustix::process::geteuid().as_raw();
    match refusal(
        meta.is_dir(),
        meta.is_file(),
        meta.mode(),
        meta.uid(),
        me,
        true,
    ) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// Elsewhere (Windows) the plugin reads no ACLs: the directory must be a directory of its own,
/// not a symbolic link or junction; its access is what it inherits (under `%LOCALAPPDATA%`,
/// the user, SYSTEM and the Administrators).
#[cfg(not(unix))]
fn open_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|err| format!("cannot create it: {err}"))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|err| err.to_string())?;
    if meta.file_type().is_symlink() {
        return Err("it is a symbolic link or junction".to_owned());
    }
    if !meta.is_dir() {
        return Err("it is not a directory".to_owned());
    }
    Ok(())
}

/// The file's text; None when there is none; Err(reason) when it must not be used.
#[cfg(unix)]
fn read_checked(path: &Path) -> Result<Option<String>, String> {
    use std::{io::Read as _, os::unix::fs::MetadataExt as _};
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err.to_string()),
    };
    let me = rustix::process::geteuid().as_raw();
    if let Some(reason) = refusal(
        meta.is_dir(),
        meta.is_file(),
        meta.mode(),
        meta.uid(),
        me,
        false,
    ) {
        return Err(reason);
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut text))
        .map_err(|err| err.to_string())?;
    Ok(Some(text))
}

#[cfg(not(unix))]
fn read_checked(path: &Path) -> Result<Option<String>, String> {
    use std::io::Read as _;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err.to_string()),
    };
    if meta.file_type().is_symlink() {
        return Err("it is a symbolic link or junction".to_owned());
    }
    if !meta.is_file() {
        return Err("it is not a regular file".to_owned());
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut text))
        .map_err(|err| err.to_string())?;
    Ok(Some(text))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
