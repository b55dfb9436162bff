//! Which flux CLI release a cluster needs, how Flux names its archives, where a mirror keeps
//! them and where the plugin caches the binary: the pure part of `kubectl tenantflux flux`,
//! unit-tested without a network or a cluster.

use std::{
    ffi::OsString,
    fmt,
    path::{Path, PathBuf},
};

/// Where Flux publishes its releases; a mirror has the same layout under its own base.
pub const DEFAULT_MIRROR: &str = "https://github.com/fluxcd/flux2/releases/download";

/// The longest checksums file read: Flux's lists a dozen archives in about 1 KiB.
pub const MAX_CHECKSUMS_BYTES: u64 = 64 * 1024;
/// The largest archive downloaded (Flux's are about 25 MiB): a bound for a broken mirror.
pub const MAX_ARCHIVE_BYTES: u64 = 512 * 1024 * 1024;
/// The largest binary taken out of an archive.
pub const MAX_BINARY_BYTES: u64 = 1024 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseError {
    #[error(
        "no Flux distribution is installed in this cluster, so there is no flux CLI version to match: \
         install Flux first (kubectl tenantflux instance apply), or run a flux CLI of your choice directly"
    )]
    NoFlux,
    #[error(
        "the cluster's Flux version {0:?} is not a release version (vX.Y.Z), so no flux CLI \
         release matches it: pass a flux CLI of the right version with --flux-cli PATH"
    )]
    NotARelease(String),
    #[error(
        "no flux CLI release for {os}/{arch}: Flux publishes linux, darwin and windows on amd64 \
         and arm64; pass a flux CLI built for this machine with --flux-cli PATH"
    )]
    UnsupportedPlatform { os: String, arch: String },
    #[error(
        "{checksums} lists no sha256 for {archive}: the mirror does not hold this platform's \
         archive of the release (or its checksums file is not Flux's)"
    )]
    NotListed { checksums: String, archive: String },
    #[error("{checksums} is not a sha256 checksums file (line {line}: {text:?})")]
    BadChecksums {
        checksums: String,
        line: usize,
        text: String,
    },
    #[error(
        "--flux-cli-mirror {0:?} is neither an https:// or http:// URL, a file:// URL, nor a directory path"
    )]
    BadMirror(String),
}

/// A Flux release, e.g. v2.9.5: what the cluster runs and so the flux CLI to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release(semver::Version);

impl Release {
    /// The release of the Flux the cluster runs (`v2.9.5`, as the agent reports it).
    pub fn of_cluster(flux: &str) -> Result<Self, ReleaseError> {
        let flux = flux.trim();
        if flux.is_empty() {
            return Err(ReleaseError::NoFlux);
        }
        Self::parse(flux).ok_or_else(|| ReleaseError::NotARelease(flux.to_owned()))
    }

    /// `v2.9.5`, `2.9.5` and `v2.10.0-rc.1` parse; `2.9.x`, `v2.9` and build metadata do not.
    pub fn parse(text: &str) -> Option<Self> {
        let version = semver::Version::parse(text.strip_prefix('v').unwrap_or(text)).ok()?;
        version.build.is_empty().then_some(Self(version))
    }

    /// The release's tag, `v2.9.5`: the folder of a mirror and of the cache.
    pub fn tag(&self) -> String {
        format!("v{}", self.0)
    }

    /// The archive of the flux CLI for `platform`: `flux_2.9.5_linux_amd64.tar.gz`.
    pub fn archive(&self, platform: Platform) -> String {
        let extension = match platform.os {
            Os::Windows => "zip",
            Os::Linux | Os::Darwin => "tar.gz",
        };
        format!(
            "flux_{}_{}_{}.{extension}",
            self.0,
            platform.os.name(),
            platform.arch.name()
        )
    }

    /// The release's checksums file: `flux_2.9.5_checksums.txt`.
    pub fn checksums(&self) -> String {
        format!("flux_{}_checksums.txt", self.0)
    }

    /// Whether a flux CLI that reports `version` (as `flux version --client` prints it) is this
    /// release: the same version exactly, a leading `v` aside.
    pub fn is(&self, version: &str) -> bool {
        Self::parse(version.trim()).is_some_and(|found| found == *self)
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    Linux,
    Darwin,
    Windows,
}

impl Os {
    /// As Flux's archives name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Linux => "linux",
            Self::Darwin => "darwin",
            Self::Windows => "windows",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    /// As Flux's archives name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Amd64 => "amd64",
            Self::Arm64 => "arm64",
        }
    }
}

/// The platforms the plugin is released for (deploy/krew/tenantflux.yaml), which are the ones
/// Flux publishes a CLI for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platform {
    pub os: Os,
    pub arch: Arch,
}

impl Platform {
    /// The platform this plugin was built for.
    pub fn current() -> Result<Self, ReleaseError> {
        Self::from_rust(std::env::consts::OS, std::env::consts::ARCH)
    }

    /// From Rust's names (`std::env::consts`): `linux`/`macos`/`windows`, `x86_64`/`aarch64`.
    pub fn from_rust(os: &str, arch: &str) -> Result<Self, ReleaseError> {
        let unsupported = || ReleaseError::UnsupportedPlatform {
            os: os.to_owned(),
            arch: arch.to_owned(),
        };
        let os = match os {
            "linux" => Os::Linux,
            "macos" => Os::Darwin,
            "windows" => Os::Windows,
            _ => return Err(unsupported()),
        };
        let arch = match arch {
            "x86_64" => Arch::Amd64,
            "aarch64" => Arch::Arm64,
            _ => return Err(unsupported()),
        };
        Ok(Self { os, arch })
    }

    /// The binary's name in the archive and in the cache.
    pub fn binary(self) -> &'static str {
        match self.os {
            Os::Windows => "flux.exe",
            Os::Linux | Os::Darwin => "flux",
        }
    }
}

/// The sha256 that `checksums` (the text of Flux's `flux_X.Y.Z_checksums.txt`, named
/// `checksums_name` in errors) lists for `archive`. Lines are `HEX  NAME` (sha256sum's
/// format; `*NAME` marks binary mode); a malformed line is an error, not skipped, so a file
/// that is not a checksums file is never half-read.
pub fn checksum_of(
    checksums: &str,
    checksums_name: &str,
    archive: &str,
) -> Result<[u8; 32], ReleaseError> {
    for (index, line) in checksums.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || ReleaseError::BadChecksums {
            checksums: checksums_name.to_owned(),
            line: index + 1,
            text: line.chars().take(80).collect(),
        };
        let (hex, name) = line
            .trim()
            .split_once(char::is_whitespace)
            .ok_or_else(bad)?;
        let digest = parse_sha256(hex).ok_or_else(bad)?;
        let name = name.trim_start();
        if name.strip_prefix('*').unwrap_or(name) == archive {
            return Ok(digest);
        }
    }
    Err(ReleaseError::NotListed {
        checksums: checksums_name.to_owned(),
        archive: archive.to_owned(),
    })
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(digest)
}

/// Lower-case hex, as checksums files write digests.
pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where releases are taken from: an HTTP(S) server, or a directory (air-gapped), both in
/// the layout of Flux's GitHub releases: `BASE/vX.Y.Z/flux_X.Y.Z_OS_ARCH.tar.gz` (`.zip` on
/// Windows) beside `BASE/vX.Y.Z/flux_X.Y.Z_checksums.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mirror {
    Http(String),
    Dir(PathBuf),
}

impl Mirror {
    /// `https://…` or `http://…`, `file:///…`, or a path (absolute, or relative to the
    /// working directory).
    pub fn parse(text: &str) -> Result<Self, ReleaseError> {
        let bad = || ReleaseError::BadMirror(text.chars().take(200).collect());
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(bad());
        }
        let lower = trimmed.to_ascii_lowercase();
        if lower.starts_with("https://") || lower.starts_with("http://") {
            let base = trimmed.trim_end_matches('/');
            // A URL with nothing after the scheme has no host to ask.
            if base.len() <= lower.find("://").map_or(0, |i| i + 3) {
                return Err(bad());
            }
            return Ok(Self::Http(base.to_owned()));
        }
        if let Some(path) = trimmed.strip_prefix("file://") {
            // file:///srv/flux and file://localhost/srv/flux; another host is no local path.
            let path = path.strip_prefix("localhost").unwrap_or(path);
            return file_url_path(path).map(Self::Dir).ok_or_else(bad);
        }
        if lower.contains("://") {
            return Err(bad());
        }
        Ok(Self::Dir(PathBuf::from(trimmed)))
    }

    /// Where `file` of `release` is in this mirror.
    pub fn locate(&self, release: &Release, file: &str) -> Location {
        match self {
            Self::Http(base) => Location::Url(format!("{base}/{}/{file}", release.tag())),
            Self::Dir(dir) => Location::File(dir.join(release.tag()).join(file)),
        }
    }
}

/// The path of a `file://` URL's path part: `/srv/flux`, or `/C:/flux` on Windows; `%20` and
/// other escapes decoded.
fn file_url_path(path: &str) -> Option<PathBuf> {
    if !path.starts_with('/') {
        return None;
    }
    let mut bytes = Vec::with_capacity(path.len());
    let mut rest = path.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' {
            let pair = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(pair, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    let decoded = String::from_utf8(bytes).ok()?;
    // `/C:/flux` is drive C: on Windows.
    let windows_drive = decoded.len() >= 3
        && decoded.as_bytes()[2] == b':'
        && decoded.as_bytes()[1].is_ascii_alphabetic();
    if cfg!(windows) && windows_drive {
        return Some(PathBuf::from(&decoded[1..]));
    }
    Some(PathBuf::from(decoded))
}

/// A file of a mirror: what errors and progress name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Url(String),
    File(PathBuf),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(url) => f.write_str(url),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The flux CLI cache: `$XDG_CACHE_HOME/tenantflux/flux-cli`, else
/// `~/.cache/tenantflux/flux-cli`; on Windows `%LOCALAPPDATA%\tenantflux\flux-cli` (as the
/// credential cache beside it). `None` without a home to put it in.
pub fn cache_root(
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
    local_app_data: Option<OsString>,
    windows: bool,
) -> Option<PathBuf> {
    let absolute = |d: OsString| Some(PathBuf::from(d)).filter(|d| d.is_absolute());
    let base = xdg_cache_home.and_then(absolute).or_else(|| {
        if windows {
            local_app_data.and_then(absolute)
        } else {
            home.and_then(absolute).map(|home| home.join(".cache"))
        }
    })?;
    Some(base.join("tenantflux").join("flux-cli"))
}

/// The binary of `release` in the cache under `root`: `ROOT/vX.Y.Z/flux`. Only a verified
/// binary is ever there: it is written in a temporary folder and renamed into place.
pub fn cached_binary(root: &Path, release: &Release, platform: Platform) -> PathBuf {
    root.join(release.tag()).join(platform.binary())
}

/// The flags that hand the plugin's `--kubeconfig`, `--context` and `-n` to flux, and the
/// KUBECONFIG flux must see instead of a flag: flux's `--kubeconfig` takes one file, so a
/// list (as in KUBECONFIG) is passed as KUBECONFIG. A kubeconfig that only came from the
/// environment's KUBECONFIG (`env_kubeconfig`) is left to it: flux reads it the same way.
pub fn flux_flags(
    kubeconfig: Option<&OsString>,
    env_kubeconfig: Option<&OsString>,
    context: Option<&str>,
    namespace: Option<&str>,
) -> (Vec<OsString>, Option<OsString>) {
    let mut flags = Vec::new();
    let mut env = None;
    if let Some(kubeconfig) = kubeconfig.filter(|k| Some(*k) != env_kubeconfig && !k.is_empty()) {
        if std::env::split_paths(kubeconfig).nth(1).is_some() {
            env = Some(kubeconfig.clone());
        } else {
            let mut flag = OsString::from("--kubeconfig=");
            flag.push(kubeconfig);
            flags.push(flag);
        }
    }
    if let Some(context) = context {
        flags.push(format!("--context={context}").into());
    }
    if let Some(namespace) = namespace {
        flags.push(format!("--namespace={namespace}").into());
    }
    (flags, env)
}

/// `12.3 MiB`: sizes in progress lines.
pub fn size(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes < 1024 * 1024 {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINUX_AMD64: Platform = Platform {
        os: Os::Linux,
        arch: Arch::Amd64,
    };

    fn release(text: &str) -> Release {
        Release::parse(text).expect("a release")
    }

    #[test]
    fn the_cluster_flux_is_a_release_or_a_clear_error() {
        assert_eq!(Release::of_cluster("v2.9.5").unwrap().tag(), "v2.9.5");
        assert_eq!(Release::of_cluster(" 2.9.5 ").unwrap().tag(), "v2.9.5");
        assert_eq!(
            Release::of_cluster("v2.10.0-rc.1").unwrap().tag(),
            "v2.10.0-rc.1"
        );
        assert_eq!(Release::of_cluster(""), Err(ReleaseError::NoFlux));
        for not_a_release in ["2.9.x", "v2.9", "latest", "v2.9.5+build.1"] {
            let err = Release::of_cluster(not_a_release).unwrap_err();
            assert_eq!(err, ReleaseError::NotARelease(not_a_release.to_owned()));
            assert!(err.to_string().contains("--flux-cli PATH"), "{err}");
        }
    }

    #[test]
    fn archive_names_for_every_platform_of_the_krew_manifest() {
        let v = release("v2.9.5");
        let name = |os, arch| v.archive(Platform { os, arch });
        assert_eq!(
            name(Os::Linux, Arch::Amd64),
            "flux_2.9.5_linux_amd64.tar.gz"
        );
        assert_eq!(
            name(Os::Linux, Arch::Arm64),
            "flux_2.9.5_linux_arm64.tar.gz"
        );
        assert_eq!(
            name(Os::Darwin, Arch::Amd64),
            "flux_2.9.5_darwin_amd64.tar.gz"
        );
        assert_eq!(
            name(Os::Darwin, Arch::Arm64),
            "flux_2.9.5_darwin_arm64.tar.gz"
        );
        assert_eq!(
            name(Os::Windows, Arch::Amd64),
            "flux_2.9.5_windows_amd64.zip"
        );
        assert_eq!(
            name(Os::Windows, Arch::Arm64),
            "flux_2.9.5_windows_arm64.zip"
        );
        assert_eq!(v.checksums(), "flux_2.9.5_checksums.txt");
        let krew = include_str!("../../../deploy/krew/tenantflux.yaml");
        for (os, arch) in [
            ("linux", "amd64"),
            ("linux", "arm64"),
            ("darwin", "amd64"),
            ("darwin", "arm64"),
            ("windows", "amd64"),
            ("windows", "arm64"),
        ] {
            assert!(
                krew.contains(&format!("os: {os}")) && krew.contains(&format!("arch: {arch}")),
                "the krew manifest ships {os}/{arch}"
            );
        }
    }

    #[test]
    fn platforms_from_rusts_names() {
        assert_eq!(Platform::from_rust("linux", "x86_64"), Ok(LINUX_AMD64));
        assert_eq!(
            Platform::from_rust("macos", "aarch64"),
            Ok(Platform {
                os: Os::Darwin,
                arch: Arch::Arm64
            })
        );
        let windows = Platform::from_rust("windows", "x86_64").unwrap();
        assert_eq!(windows.binary(), "flux.exe");
        assert_eq!(LINUX_AMD64.binary(), "flux");
        let err = Platform::from_rust("freebsd", "x86_64").unwrap_err();
        assert!(err.to_string().contains("freebsd/x86_64"), "{err}");
        assert!(Platform::from_rust("linux", "riscv64").is_err());
        assert!(
            Platform::current().is_ok(),
            "the test machine is a release platform"
        );
    }

    const CHECKSUMS: &str = "\
0f4c1a8e6e1d1b4f0b7a1c5b6c0f3e1a2b3c4d5e6f708192a3b4c5d6e7f80910  flux_2.9.5_darwin_amd64.tar.gz
a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90  flux_2.9.5_linux_amd64.tar.gz
ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100 *flux_2.9.5_windows_amd64.zip
";

    #[test]
    fn checksums_files_are_read_line_by_line() {
        let digest = checksum_of(
            CHECKSUMS,
            "flux_2.9.5_checksums.txt",
            "flux_2.9.5_linux_amd64.tar.gz",
        )
        .unwrap();
        assert_eq!(
            hex(&digest),
            "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
        );
        let windows = checksum_of(CHECKSUMS, "c", "flux_2.9.5_windows_amd64.zip").unwrap();
        assert_eq!(windows[0], 0xff);
        // Upper-case hex is the same digest.
        let upper = CHECKSUMS
            .to_uppercase()
            .replace("FLUX_2.9.5_LINUX_AMD64.TAR.GZ", "x");
        assert_eq!(checksum_of(&upper, "c", "x").unwrap(), digest);
    }

    #[test]
    fn a_missing_archive_or_a_malformed_file_is_an_error_naming_both() {
        let missing = checksum_of(
            CHECKSUMS,
            "flux_2.9.5_checksums.txt",
            "flux_2.9.5_linux_arm64.tar.gz",
        )
        .unwrap_err();
        assert!(
            missing.to_string().starts_with(
                "flux_2.9.5_checksums.txt lists no sha256 for flux_2.9.5_linux_arm64.tar.gz"
            ),
            "{missing}"
        );
        // Only a prefix of the name is no match.
        assert!(checksum_of(CHECKSUMS, "c", "flux_2.9.5_linux_amd64.tar").is_err());
        for bad in [
            "<html>Not Found</html>\n",
            "abc  flux_2.9.5_linux_amd64.tar.gz\n",
            "zz1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90  flux\n",
            "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90\n",
        ] {
            let err = checksum_of(bad, "sums.txt", "flux_2.9.5_linux_amd64.tar.gz").unwrap_err();
            assert!(
                matches!(err, ReleaseError::BadChecksums { line: 1, .. }),
                "{bad:?}: {err}"
            );
        }
        assert!(matches!(
            checksum_of("", "sums.txt", "a"),
            Err(ReleaseError::NotListed { .. })
        ));
    }

    #[test]
    fn mirrors_in_the_release_layout() {
        let v = release("2.9.5");
        let github = Mirror::parse(DEFAULT_MIRROR).unwrap();
        assert_eq!(
            github.locate(&v, &v.archive(LINUX_AMD64)).to_string(),
            "https://github.com/fluxcd/flux2/releases/download/v2.9.5/flux_2.9.5_linux_amd64.tar.gz"
        );
        let mirror = Mirror::parse("https://mirror.example/flux/").unwrap();
        assert_eq!(
            mirror.locate(&v, &v.checksums()),
            Location::Url("https://mirror.example/flux/v2.9.5/flux_2.9.5_checksums.txt".into())
        );
        assert_eq!(
            Mirror::parse("HTTP://127.0.0.1:8080").unwrap(),
            Mirror::Http("HTTP://127.0.0.1:8080".into())
        );
        assert_eq!(
            Mirror::parse("file:///srv/flux%20cli").unwrap(),
            Mirror::Dir("/srv/flux cli".into())
        );
        assert_eq!(
            Mirror::parse("file://localhost/srv/flux").unwrap(),
            Mirror::Dir("/srv/flux".into())
        );
        let dir = Mirror::parse("/srv/flux").unwrap();
        assert_eq!(
            dir.locate(&v, &v.checksums()),
            Location::File(Path::new("/srv/flux/v2.9.5/flux_2.9.5_checksums.txt").into())
        );
        assert_eq!(
            Mirror::parse("mirror").unwrap(),
            Mirror::Dir("mirror".into())
        );
        for bad in [
            "",
            "https://",
            "ftp://mirror.example",
            "file://host/srv",
            "file://%zz",
        ] {
            assert!(
                matches!(Mirror::parse(bad), Err(ReleaseError::BadMirror(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_cache_follows_xdg_and_the_platform() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            cache_root(os("/xdg"), os("/home/u"), None, false),
            Some(PathBuf::from("/xdg/tenantflux/flux-cli"))
        );
        assert_eq!(
            cache_root(None, os("/home/u"), None, false),
            Some(PathBuf::from("/home/u/.cache/tenantflux/flux-cli"))
        );
        // A relative XDG_CACHE_HOME is ignored, as the XDG spec says.
        assert_eq!(
            cache_root(os("relative"), os("/home/u"), None, false),
            Some(PathBuf::from("/home/u/.cache/tenantflux/flux-cli"))
        );
        assert_eq!(cache_root(None, None, os("/lad"), false), None);
        assert_eq!(cache_root(None, os("relative"), None, false), None);
        if !cfg!(windows) {
            // On a Unix test machine "/lad" is absolute, which is all this checks.
            assert_eq!(
                cache_root(None, os("/home/u"), os("/lad"), true),
                Some(PathBuf::from("/lad/tenantflux/flux-cli"))
            );
        }
        let root = PathBuf::from("/c/tenantflux/flux-cli");
        assert_eq!(
            cached_binary(&root, &release("v2.9.5"), LINUX_AMD64),
            PathBuf::from("/c/tenantflux/flux-cli/v2.9.5/flux")
        );
    }

    #[test]
    fn a_cli_matches_only_its_exact_release() {
        let v = release("v2.9.5");
        assert!(v.is("v2.9.5"));
        assert!(v.is("2.9.5\n"));
        assert!(!v.is("v2.9.4"));
        assert!(!v.is("v2.9.5-rc.1"));
        assert!(!v.is("v2.10.5"));
        assert!(!v.is("0.0.0-dev.0"));
        assert!(!v.is(""));
    }

    #[test]
    fn the_plugins_flags_become_fluxs() {
        let os = |s: &str| OsString::from(s);
        let (flags, env) = flux_flags(Some(&os("/k/config")), None, Some("tenant-a"), Some("apps"));
        assert_eq!(
            flags,
            [
                "--kubeconfig=/k/config",
                "--context=tenant-a",
                "--namespace=apps"
            ]
        );
        assert_eq!(env, None);
        // From KUBECONFIG: flux reads the variable itself.
        let (flags, env) = flux_flags(Some(&os("/k/config")), Some(&os("/k/config")), None, None);
        assert!(flags.is_empty() && env.is_none(), "{flags:?}");
        // A list goes as KUBECONFIG, which merges it.
        let list = std::env::join_paths(["/a", "/b"]).unwrap();
        let (flags, env) = flux_flags(Some(&list), None, None, Some("x"));
        assert_eq!(flags, ["--namespace=x"]);
        assert_eq!(env, Some(list));
    }

    #[test]
    fn sizes_read_as_people_do() {
        assert_eq!(size(512 * 1024), "512 KiB");
        assert_eq!(size(25 * 1024 * 1024 + 300 * 1024), "25.3 MiB");
    }
}
