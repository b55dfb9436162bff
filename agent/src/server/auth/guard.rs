//! Streams that end when their caller no longer holds: a watch opened with a valid token and
//! a granted Role must not outlive either.

use std::{sync::Arc, time::Duration};

use k8s_openapi::jiff::Timestamp;
use tonic::metadata::MetadataMap;

use super::{
    AuthError, Authorizer, Permission,
    credential::{Credential, token_expiry},
};

/// A stream of gRPC answers, as a server-streaming RPC returns it.
pub type GuardedStream<T> =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<T, tonic::Status>> + Send>>;

/// How soon a recheck that could not reach the API server is tried again.
const RECHECK_RETRY: Duration = Duration::from_secs(10);

impl Authorizer {
    /// `stream`, ended when its caller no longer holds: every recheck interval, and at the
    /// token's expiry when it carries one, the token is reviewed again and each of
    /// `permissions` asked again, past the caches. A token no longer valid ends the stream
    /// with UNAUTHENTICATED, a permission gone with PERMISSION_DENIED naming it. When the API
    /// server cannot be asked, the stream goes on and the check is tried again shortly: an
    /// outage must not cut every watch.
    pub fn guard<T: Send + 'static>(
        self: &Arc<Self>,
        metadata: &MetadataMap,
        permissions: Vec<Permission>,
        stream: GuardedStream<T>,
    ) -> GuardedStream<T> {
        let Some(credential) = Credential::of(metadata) else {
            return stream;
        };
        let this = self.clone();
        let watchdog = async move {
            let mut expiry = match &credential {
                Credential::Token(token) => token_expiry(token),
                Credential::Proof(_) => None,
            };
            let mut wait = this.stream_recheck;
            loop {
                let until_expiry = expiry.map(|at| {
                    Duration::try_from(Timestamp::now().duration_until(at)).unwrap_or_default()
                });
                let sleep = match until_expiry {
                    // A moment past it, so the API server agrees it expired; once only, so
                    // a clock ahead of the API server's does not turn it into a busy loop.
                    Some(left) if left < wait => {
                        expiry = None;
                        left + Duration::from_secs(1)
                    }
                    _ => wait,
                };
                tokio::time::sleep(sleep).await;
                match this.recheck(&credential, &permissions).await {
                    Ok(ends) => {
                        wait = this.stream_recheck;
                        // A proof's CSR stops proving anything at its age limit: check then.
                        if let Some(ends) = ends.filter(|at| *at > Timestamp::now()) {
                            expiry = Some(expiry.map_or(ends, |at| at.min(ends)));
                        }
                    }
                    Err(
                        err @ (AuthError::Unauthenticated { .. }
                        | AuthError::TokenTooLong { .. }
                        | AuthError::Identity { .. }
                        | AuthError::Denied { .. }),
                    ) => {
                        let status = tonic::Status::from(err);
                        return tonic::Status::new(
                            status.code(),
                            format!("the stream ended: {}", status.message()),
                        );
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "rechecking a stream's caller; trying again");
                        wait = this.stream_recheck.min(RECHECK_RETRY);
                    }
                }
            }
        };
        end_when(stream, watchdog)
    }

    /// The token and each permission asked again of the API server, bypassing the caches;
    /// for a proof, also when its CSR becomes too old.
    async fn recheck(
        &self,
        credential: &Credential,
        permissions: &[Permission],
    ) -> Result<Option<Timestamp>, AuthError> {
        let (user, ends) = match credential {
            Credential::Token(token) => (self.review_user(token).await?, None),
            // The proof was fresh when the stream opened; now the CSR must still be there,
            // undenied and young enough.
            Credential::Proof(proof) => {
                let (user, ends) = self.proven_user(proof, false).await?;
                (user, Some(ends))
            }
        };
        for permission in permissions {
            self.access_review(&user, permission)
                .await?
                .into_result(&user, permission)?;
        }
        Ok(ends)
    }
}

/// `stream` until it ends, or until `revoked` resolves: then its status is the last item.
fn end_when<T: Send + 'static>(
    stream: GuardedStream<T>,
    revoked: impl std::future::Future<Output = tonic::Status> + Send + 'static,
) -> GuardedStream<T> {
    use futures::StreamExt as _;

    enum Item<T> {
        Next(Result<T, tonic::Status>),
        End,
        Revoked(tonic::Status),
    }
    let inner = stream
        .map(Item::Next)
        .chain(futures::stream::once(std::future::ready(Item::End)));
    let revoked = futures::stream::once(revoked).map(Item::Revoked);
    let mut ended = false;
    let merged = futures::stream::select(inner, revoked)
        .take_while(move |item| {
            let go = !ended && !matches!(item, Item::End);
            ended |= matches!(item, Item::Revoked(_));
            std::future::ready(go)
        })
        .map(|item| match item {
            Item::Next(result) => result,
            Item::Revoked(status) => Err(status),
            Item::End => unreachable!("take_while stops at the end"),
        });
    Box::pin(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_guarded_stream_ends_with_the_revocation_or_with_itself() {
        use futures::StreamExt as _;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let (revoke, revoked) = tokio::sync::oneshot::channel::<tonic::Status>();
        let items: GuardedStream<u32> =
            Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(Ok));
        let mut stream = end_when(items, async move { revoked.await.unwrap() });
        tx.send(1).unwrap();
        assert_eq!(stream.next().await.unwrap().unwrap(), 1);
        revoke
            .send(tonic::Status::permission_denied("the stream ended: gone"))
            .unwrap();
        let err = stream.next().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
        tx.send(2).unwrap();
        assert!(
            stream.next().await.is_none(),
            "nothing after the revocation"
        );

        // A stream that ends on its own ends at once, its watchdog still waiting.
        let items: GuardedStream<u32> = Box::pin(futures::stream::iter([Ok(7)]));
        let mut stream = end_when(items, std::future::pending());
        assert_eq!(stream.next().await.unwrap().unwrap(), 7);
        assert!(stream.next().await.is_none());
    }
}
