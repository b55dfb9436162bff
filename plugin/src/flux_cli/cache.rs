//! The flux CLI cache: one folder per release (`ROOT/vX.Y.Z/flux`), filled from Flux's release
//! archives (GitHub, a mirror, or a directory) only after the archive's sha256 matched the
//! release's checksums file. The folder is assembled under a temporary name and renamed into
//! place, so a cut download or a failed check leaves nothing that could run.

use std::{
    fs,
    io::{self, IsTerminal as _, Read, Write},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use sha2::{Digest as _, Sha256};

use super::release::{
    self, Location, MAX_ARCHIVE_BYTES, MAX_BINARY_BYTES, MAX_CHECKSUMS_BYTES, Mirror, Os, Platform,
    Release, ReleaseError,
};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a download may stall (not how long it may take).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Release(#[from] ReleaseError),
    #[error(
        "no cache directory for the flux CLI: neither XDG_CACHE_HOME nor HOME (LOCALAPPDATA on \
         Windows) is an absolute path; set one, or pass a flux CLI with --flux-cli PATH"
    )]
    NoCacheDir,
    #[error("cannot read the CA bundle {path} (--flux-cli-mirror-ca): {cause}")]
    Ca { path: PathBuf, cause: String },
    #[error(
        "cannot download {location}: {cause} (offline? behind a proxy? for a mirror, pass \
         --flux-cli-mirror URL, or a directory holding the release for air-gapped machines)"
    )]
    Unreachable { location: Location, cause: String },
    #[error(
        "cannot download {location}: the server answered {status} (does the mirror hold this \
         release, in the layout BASE/vX.Y.Z/FILE?)"
    )]
    Status { location: Location, status: u16 },
    #[error("cannot read {location}: {cause}")]
    Read { location: Location, cause: String },
    #[error("{location} is larger than {limit}: refusing it")]
    TooLarge { location: Location, limit: String },
    #[error(
        "the sha256 of {location} is {actual}, but {checksums} lists {expected}: the download is \
         corrupt or was tampered with; it was deleted, nothing was cached or run"
    )]
    Mismatch {
        location: Location,
        checksums: Location,
        expected: String,
        actual: String,
    },
    #[error("{location} holds no {binary} (is it Flux's release archive?)")]
    NoBinary { location: Location, binary: String },
    #[error("cannot unpack {location}: {cause}")]
    Unpack { location: Location, cause: String },
    #[error("cannot write the flux CLI cache {path}: {cause}")]
    Cache { path: PathBuf, cause: String },
}

/// Where releases come from, and the CA a private mirror's certificate is signed by.
#[derive(Debug, Clone)]
pub struct Source {
    pub mirror: Mirror,
    pub ca: Option<PathBuf>,
}

/// The cache directory of this user (see [`release::cache_root`]).
pub fn default_root() -> Result<PathBuf, FetchError> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    release::cache_root(
        env("XDG_CACHE_HOME"),
        env("HOME"),
        env("LOCALAPPDATA"),
        cfg!(windows),
    )
    .ok_or(FetchError::NoCacheDir)
}

/// The cached binary of `release`, if it is there.
pub fn cached(root: &Path, release: &Release, platform: Platform) -> Option<PathBuf> {
    let binary = release::cached_binary(root, release, platform);
    binary.is_file().then_some(binary)
}

/// The binary of `release` from the cache, downloading and verifying it first when missing.
pub async fn ensure(
    root: &Path,
    release: &Release,
    platform: Platform,
    source: &Source,
) -> Result<PathBuf, FetchError> {
    if let Some(binary) = cached(root, release, platform) {
        return Ok(binary);
    }
    let cache_error = |path: &Path| {
        let path = path.to_owned();
        move |err: io::Error| FetchError::Cache {
            path,
            cause: err.to_string(),
        }
    };
    fs::create_dir_all(root).map_err(cache_error(root))?;
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{}.", release.tag()))
        .tempdir_in(root)
        .map_err(cache_error(root))?;

    let reader = Reader::new(source)?;
    let checksums_at = source.mirror.locate(release, &release.checksums());
    let checksums = reader.text(&checksums_at, MAX_CHECKSUMS_BYTES).await?;
    let archive_name = release.archive(platform);
    let expected = release::checksum_of(&checksums, &checksums_at.to_string(), &archive_name)?;

    let archive_at = source.mirror.locate(release, &archive_name);
    let archive_path = staging.path().join(&archive_name);
    let actual = reader.save(&archive_at, &archive_path).await?;
    if actual != expected {
        // `staging` and the archive in it are deleted on return.
        return Err(FetchError::Mismatch {
            location: archive_at,
            checksums: checksums_at,
            expected: release::hex(&expected),
            actual: release::hex(&actual),
        });
    }

    let binary = staging.path().join(platform.binary());
    unpack(&archive_path, &archive_at, platform, &binary)?;
    fs::remove_file(&archive_path).map_err(cache_error(&archive_path))?;
    let target = root.join(release.tag());
    match fs::rename(staging.path(), &target) {
        Ok(()) => {
            let _ = staging.keep();
        }
        // Another run installed it meanwhile: it went through the same check.
        Err(_) if cached(root, release, platform).is_some() => {}
        Err(err) => return Err(cache_error(&target)(err)),
    }
    Ok(release::cached_binary(root, release, platform))
}

/// Reads a mirror's files: over HTTP(S), or from a directory.
enum Reader {
    Http(reqwest::Client),
    Dir,
}

impl Reader {
    fn new(source: &Source) -> Result<Self, FetchError> {
        if let Mirror::Dir(_) = source.mirror {
            return Ok(Self::Dir);
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("kubectl-tenantflux/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &source.ca {
            let ca_error = |cause: String| FetchError::Ca {
                path: path.clone(),
                cause,
            };
            let pem = fs::read(path).map_err(|err| ca_error(err.to_string()))?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|err| ca_error(format!("{err:#}")))?;
            if certificates.is_empty() {
                return Err(ca_error("it holds no PEM certificate".to_owned()));
            }
            // Besides the platform's roots, as SSL_CERT_FILE adds nothing on macOS and Windows.
            builder = builder.tls_certs_merge(certificates);
        }
        builder
            .build()
            .map(Self::Http)
            .map_err(|err| FetchError::Ca {
                path: source.ca.clone().unwrap_or_default(),
                cause: error_chain(&err),
            })
    }

    /// A small text file (the checksums), whole.
    async fn text(&self, location: &Location, limit: u64) -> Result<String, FetchError> {
        let mut bytes = Vec::new();
        self.copy(location, limit, &mut bytes, None).await?;
        String::from_utf8(bytes).map_err(|_| FetchError::Read {
            location: location.clone(),
            cause: "not UTF-8 text".to_owned(),
        })
    }

    /// Writes `location` to `path` with progress on stderr; returns the sha256 of what it wrote.
    async fn save(&self, location: &Location, path: &Path) -> Result<[u8; 32], FetchError> {
        let file = fs::File::create(path).map_err(|err| FetchError::Cache {
            path: path.to_owned(),
            cause: err.to_string(),
        })?;
        let mut out = Hashing {
            inner: io::BufWriter::new(file),
            hash: Sha256::new(),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut progress = Progress::new(name);
        self.copy(location, MAX_ARCHIVE_BYTES, &mut out, Some(&mut progress))
            .await?;
        progress.done();
        out.inner.flush().map_err(|err| FetchError::Cache {
            path: path.to_owned(),
            cause: err.to_string(),
        })?;
        Ok(out.hash.finalize().into())
    }

    async fn copy(
        &self,
        location: &Location,
        limit: u64,
        out: &mut dyn Write,
        mut progress: Option<&mut Progress>,
    ) -> Result<(), FetchError> {
        let too_large = || FetchError::TooLarge {
            location: location.clone(),
            limit: release::size(limit),
        };
        let write_error = |err: io::Error| FetchError::Read {
            location: location.clone(),
            cause: format!("writing it: {err}"),
        };
        match (self, location) {
            (Self::Http(client), Location::Url(url)) => {
                let unreachable = |err: reqwest::Error| FetchError::Unreachable {
                    location: location.clone(),
                    cause: error_chain(&err),
                };
                let mut response = client.get(url).send().await.map_err(unreachable)?;
                let status = response.status();
                if !status.is_success() {
                    return Err(FetchError::Status {
                        location: location.clone(),
                        status: status.as_u16(),
                    });
                }
                let total = response.content_length();
                if total.is_some_and(|t| t > limit) {
                    return Err(too_large());
                }
                if let Some(progress) = progress.as_deref_mut() {
                    progress.start(location, total);
                }
                let mut seen = 0u64;
                while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
                    seen += chunk.len() as u64;
                    if seen > limit {
                        return Err(too_large());
                    }
                    out.write_all(&chunk).map_err(write_error)?;
                    if let Some(progress) = progress.as_deref_mut() {
                        progress.update(seen);
                    }
                }
                Ok(())
            }
            (Self::Dir, Location::File(path)) => {
                let read_error = |err: io::Error| FetchError::Read {
                    location: location.clone(),
                    cause: err.to_string(),
                };
                let file = fs::File::open(path).map_err(read_error)?;
                let total = file.metadata().map_err(read_error)?.len();
                if total > limit {
                    return Err(too_large());
                }
                if let Some(progress) = progress {
                    progress.start(location, Some(total));
                }
                let copied = io::copy(&mut file.take(limit + 1), out).map_err(read_error)?;
                if copied > limit {
                    return Err(too_large());
                }
                Ok(())
            }
            _ => unreachable!("a reader is made for its mirror's kind of location"),
        }
    }
}

/// The messages of an error and its sources, one after another (reqwest's own says little).
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

struct Hashing<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hash.update(&buf[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Download progress on stderr: one line that counts up on a terminal, else one line in all.
struct Progress {
    name: String,
    total: Option<u64>,
    terminal: bool,
    shown: Option<Instant>,
}

impl Progress {
    fn new(name: String) -> Self {
        Self {
            name,
            total: None,
            terminal: io::stderr().is_terminal(),
            shown: None,
        }
    }

    fn start(&mut self, location: &Location, total: Option<u64>) {
        self.total = total;
        let size = total.map(|t| format!(" ({})", release::size(t)));
        eprintln!(
            "downloading the flux CLI from {location}{}",
            size.unwrap_or_default()
        );
    }

    fn update(&mut self, seen: u64) {
        if !self.terminal
            || self
                .shown
                .is_some_and(|at| at.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.shown = Some(Instant::now());
        let total = self
            .total
            .map(|t| format!(" / {}", release::size(t)))
            .unwrap_or_default();
        eprint!("\r\x1b[K{}: {}{total}", self.name, release::size(seen));
    }

    fn done(&self) {
        if self.terminal && self.shown.is_some() {
            eprintln!();
        }
    }
}

/// Takes the binary out of a verified archive: `flux` from a .tar.gz, `flux.exe` from a .zip,
/// at the archive's top level as Flux packs it; written executable.
fn unpack(
    archive: &Path,
    location: &Location,
    platform: Platform,
    binary: &Path,
) -> Result<(), FetchError> {
    let unpack_error = |err: &dyn std::fmt::Display| FetchError::Unpack {
        location: location.clone(),
        cause: err.to_string(),
    };
    let file = fs::File::open(archive).map_err(|err| unpack_error(&err))?;
    let mut out = fs::File::create(binary).map_err(|err| FetchError::Cache {
        path: binary.to_owned(),
        cause: err.to_string(),
    })?;
    let found = match platform.os {
        Os::Windows => unzip(file, platform.binary(), &mut out),
        Os::Linux | Os::Darwin => untar(file, platform.binary(), &mut out),
    }
    .map_err(|err| unpack_error(&err))?;
    if !found {
        return Err(FetchError::NoBinary {
            location: location.clone(),
            binary: platform.binary().to_owned(),
        });
    }
    out.sync_all().map_err(|err| unpack_error(&err))?;
    make_executable(binary).map_err(|err| FetchError::Cache {
        path: binary.to_owned(),
        cause: err.to_string(),
    })
}

/// Copies entry `name` of a gzipped tar to `out`; false when the archive has none.
pub(crate) fn untar(archive: impl Read, name: &str, out: &mut impl Write) -> io::Result<bool> {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    for entry in tar.entries()? {
        let entry = entry?;
        let path = entry.path()?;
        let matches = path.strip_prefix(".").unwrap_or(&path) == Path::new(name);
        if matches && entry.header().entry_type().is_file() {
            copy_bounded(entry, out)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// Copies entry `name` of a zip archive to `out`; false when the archive has none.
pub(crate) fn unzip(
    archive: impl Read + io::Seek,
    name: &str,
    out: &mut impl Write,
) -> io::Result<bool> {
    let mut zip = zip::ZipArchive::new(archive).map_err(io::Error::other)?;
    let entry = match zip.by_name(name) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => return Ok(false),
        Err(err) => return Err(io::Error::other(err)),
    };
    if !entry.is_file() {
        return Ok(false);
    }
    copy_bounded(entry, out)?;
    Ok(true)
}

fn copy_bounded(from: impl Read, out: &mut impl Write) -> io::Result<()> {
    let copied = io::copy(&mut from.take(MAX_BINARY_BYTES + 1), out)?;
    if copied > MAX_BINARY_BYTES {
        return Err(io::Error::other(format!(
            "the binary is larger than {}",
            release::size(MAX_BINARY_BYTES)
        )));
    }
    Ok(())
}

#[cfg(unix)]
fn make_executable(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    fn tar_gz(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        for (name, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o755);
            header.set_cksum();
            tar.append_data(&mut header, name, *data).unwrap();
        }
        tar.into_inner().unwrap().finish().unwrap()
    }

    fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in entries {
            zip.start_file(*name, options).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    #[test]
    fn the_binary_comes_out_of_a_tar_gz() {
        let archive = tar_gz(&[("LICENSE", b"Apache-2.0"), ("flux", b"\x7fELF the binary")]);
        let mut out = Vec::new();
        assert!(untar(Cursor::new(&archive), "flux", &mut out).unwrap());
        assert_eq!(out, b"\x7fELF the binary");
        let dotted = tar_gz(&[("./flux", b"binary")]);
        let mut out = Vec::new();
        assert!(untar(Cursor::new(&dotted), "flux", &mut out).unwrap());
        assert_eq!(out, b"binary");
        // Only the top-level entry of that name.
        let nested = tar_gz(&[("bin/flux", b"elsewhere")]);
        assert!(!untar(Cursor::new(&nested), "flux", &mut Vec::new()).unwrap());
        assert!(untar(Cursor::new(b"not gzip"), "flux", &mut Vec::new()).is_err());
    }

    #[test]
    fn the_binary_comes_out_of_a_zip() {
        let archive = zip(&[("LICENSE", b"Apache-2.0"), ("flux.exe", b"MZ the binary")]);
        let mut out = Vec::new();
        assert!(unzip(Cursor::new(&archive), "flux.exe", &mut out).unwrap());
        assert_eq!(out, b"MZ the binary");
        assert!(!unzip(Cursor::new(&archive), "flux", &mut Vec::new()).unwrap());
        assert!(
            unzip(
                Cursor::new(b"not a zip".to_vec()),
                "flux.exe",
                &mut Vec::new()
            )
            .is_err()
        );
    }

    /// A directory mirror in the release layout holding `archive` and a checksums file that
    /// lists `listed` for it.
    fn mirror(
        release: &Release,
        platform: Platform,
        archive: &[u8],
        listed: [u8; 32],
    ) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(release.tag());
        fs::create_dir_all(&folder).unwrap();
        fs::write(folder.join(release.archive(platform)), archive).unwrap();
        fs::write(
            folder.join(release.checksums()),
            format!("{}  {}\n", release::hex(&listed), release.archive(platform)),
        )
        .unwrap();
        dir
    }

    fn platform() -> Platform {
        Platform::current().unwrap()
    }

    fn archive_of(binary: &[u8]) -> Vec<u8> {
        match platform().os {
            Os::Windows => zip(&[("flux.exe", binary)]),
            Os::Linux | Os::Darwin => tar_gz(&[("flux", binary)]),
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_verified_archive_is_cached_once_and_only_it() {
        let release = Release::parse("v2.9.5").unwrap();
        let archive = archive_of(b"the flux binary");
        let digest: [u8; 32] = Sha256::digest(&archive).into();
        let mirror = mirror(&release, platform(), &archive, digest);
        let cache = tempfile::tempdir().unwrap();
        let root = cache.path().join("flux-cli");
        let source = Source {
            mirror: Mirror::Dir(mirror.path().to_owned()),
            ca: None,
        };
        assert_eq!(cached(&root, &release, platform()), None);
        let binary = runtime()
            .block_on(ensure(&root, &release, platform(), &source))
            .unwrap();
        assert_eq!(binary, release::cached_binary(&root, &release, platform()));
        assert_eq!(fs::read(&binary).unwrap(), b"the flux binary");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(
                fs::metadata(&binary).unwrap().permissions().mode() & 0o777,
                0o755
            );
        }
        // Only the release's folder, and in it only the binary.
        let names = |dir: &Path| -> Vec<String> {
            fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(&root), ["v2.9.5"]);
        assert_eq!(names(&root.join("v2.9.5")), [platform().binary()]);
        // The mirror is not read again.
        fs::remove_dir_all(mirror.path().join("v2.9.5")).unwrap();
        let again = runtime()
            .block_on(ensure(&root, &release, platform(), &source))
            .unwrap();
        assert_eq!(again, binary);
    }

    #[test]
    fn a_tampered_archive_leaves_nothing_in_the_cache() {
        let release = Release::parse("v2.9.5").unwrap();
        let genuine = archive_of(b"the flux binary");
        let digest: [u8; 32] = Sha256::digest(&genuine).into();
        let mirror = mirror(&release, platform(), &archive_of(b"evil"), digest);
        let cache = tempfile::tempdir().unwrap();
        let root = cache.path().join("flux-cli");
        let source = Source {
            mirror: Mirror::Dir(mirror.path().to_owned()),
            ca: None,
        };
        let err = runtime()
            .block_on(ensure(&root, &release, platform(), &source))
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, FetchError::Mismatch { .. }), "{text}");
        assert!(text.contains(&release.archive(platform())), "{text}");
        assert!(text.contains(&release::hex(&digest)), "{text}");
        assert!(text.contains("nothing was cached or run"), "{text}");
        assert_eq!(
            fs::read_dir(&root).unwrap().count(),
            0,
            "the cache is empty"
        );
    }

    #[test]
    fn a_missing_file_of_a_directory_mirror_names_its_path() {
        let release = Release::parse("v2.9.5").unwrap();
        let empty = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let source = Source {
            mirror: Mirror::Dir(empty.path().to_owned()),
            ca: None,
        };
        let err = runtime()
            .block_on(ensure(cache.path(), &release, platform(), &source))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "{}",
                empty
                    .path()
                    .join("v2.9.5")
                    .join("flux_2.9.5_checksums.txt")
                    .display()
            )),
            "{text}"
        );
    }
}
