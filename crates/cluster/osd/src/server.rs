//! The OSD's gRPC service as a server mounts it: the generated service for every call, except the
//! four that stream chunk data: `GetChunk` and `ReadSegment`, whose replies are sent by
//! [`crate::wire`] from the buffers the chunks were read into, and `WriteSegment` and `PutChunk`,
//! whose requests are read by it as the slices they arrived in (no copy either way). Both paths go
//! through the same handlers (`handlers.rs`, on [`crate::service::Osd`]); only the encoding
//! differs, and the bytes on the wire are the same gRPC messages.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tower_service::Service;

use crate::api;
use crate::proto;
use crate::proto::osd_server::Osd as _;
use crate::service::Osd;
use crate::wire;

/// The largest request message of the data calls: a ReadSegment's layout of n holders, one frame
/// of a streamed write.
const REQUEST_BYTES_MAX: usize = ecstack_rpc::limits::STREAM_MESSAGE_BYTES_MAX;

/// The OSD's gRPC service ([`Osd::grpc`]).
#[derive(Clone)]
pub struct OsdService {
    osd: Osd,
    generated: proto::osd_server::OsdServer<Osd>,
}

impl Osd {
    /// The gRPC service of this OSD, with the message limits of [`api::MAX_MESSAGE_BYTES`].
    pub fn grpc(&self) -> OsdService {
        OsdService {
            osd: self.clone(),
            generated: proto::osd_server::OsdServer::new(self.clone())
                .max_decoding_message_size(api::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(api::MAX_MESSAGE_BYTES),
        }
    }
}

impl Osd {
    /// Serves this OSD's service without TLS on a free port of 127.0.0.1, in the background
    /// (tests, and benchmarks of one OSD's block calls, which need no MDS); its address.
    pub async fn serve_loopback(&self) -> std::io::Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let svc = self.grpc();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        Ok(addr)
    }
}

impl NamedService for OsdService {
    const NAME: &'static str = proto::osd_server::SERVICE_NAME;
}

type ResponseFuture = tonic::codegen::BoxFuture<http::Response<Body>, Infallible>;

impl Service<http::Request<Body>> for OsdService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> ResponseFuture {
        let osd = self.osd.clone();
        match req.uri().path() {
            wire::GET_CHUNK_PATH => Box::pin(async move {
                Ok(server_streaming(req, |r| async move { osd.get_chunk(r).await }).await)
            }),
            wire::READ_SEGMENT_PATH => Box::pin(async move {
                Ok(server_streaming(req, |r| async move { osd.read_segment(r).await }).await)
            }),
            wire::WRITE_SEGMENT_PATH => Box::pin(async move {
                let age = crate::handlers::segment_age(
                    req.headers()
                        .get(api::NEW_SEGMENT_KEY)
                        .map(|v| v.as_bytes()),
                );
                let messages = wire::RequestStream::new(req.into_body(), REQUEST_BYTES_MAX);
                Ok(wire::unary_response(
                    osd.write_segment_from(messages, age).await,
                ))
            }),
            wire::PUT_CHUNK_PATH => Box::pin(async move {
                let messages = wire::RequestStream::new(req.into_body(), REQUEST_BYTES_MAX);
                Ok(wire::unary_response(osd.put_chunk_from(messages).await))
            }),
            _ => self.generated.call(req),
        }
    }
}

/// A server-streaming call answered through [`crate::wire`]: its request decoded (metadata and
/// extensions kept), `handler` run, its reply stream sent.
async fn server_streaming<R, T, F, Fut>(
    req: http::Request<Body>,
    handler: F,
) -> http::Response<Body>
where
    R: prost::Message + Default,
    T: wire::DataMessage,
    F: FnOnce(tonic::Request<R>) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<wire::ReplyStream<T>>, tonic::Status>>,
{
    let (parts, body) = req.into_parts();
    let result = match wire::read_request(body, REQUEST_BYTES_MAX).await {
        Ok(message) => {
            handler(tonic::Request::from_http(http::Request::from_parts(
                parts, message,
            )))
            .await
        }
        Err(status) => Err(status),
    };
    wire::streaming_response(result)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ecstack_codes::{new_code, CodeKind};
    use ecstack_rpc::Security;
    use tokio_stream::StreamExt;

    use super::*;
    use bytes::Bytes;

    use crate::api::{ChunkMeta, Layout, OsdCallError, OsdClient};
    use crate::chunk_store::FileStore;
    use crate::service::OsdSetup;

    const ME: u32 = 3;
    const LEN: u64 = 3_000_000;

    fn layout() -> Layout {
        crate::fuzz::local_layout(LEN, 3, ME)
    }

    async fn serve<S>(svc: S) -> String
    where
        S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        addr
    }

    /// tonic's generated client against [`OsdService`], and [`OsdClient`] (through
    /// [`crate::wire`]) against tonic's generated server: the same bytes, the same errors.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stock_grpc_clients_and_servers_interoperate() {
        let dir = tempfile::tempdir().unwrap();
        let osd = Osd::new(
            OsdSetup {
                osd_id: ME,
                code: new_code(CodeKind::RsVandermonde, 2, 1).unwrap().into(),
                store: Arc::new(FileStore::open(dir.path()).unwrap()),
                security: Security::Insecure,
                mds: Arc::new(crate::fuzz::NoMds),
            },
            0,
        );
        let data: Vec<u8> = (0..LEN as u32).map(|i| (i * 131 + i / 7) as u8).collect();
        osd.write(layout(), data.clone()).await.unwrap();
        let chunk1 = &data[1_500_000..];
        let ours = serve(osd.grpc()).await;
        let generated = serve(proto::osd_server::OsdServer::new(osd.clone())).await;

        // tonic's client, our service.
        let mut raw = proto::osd_client::OsdClient::connect(format!("http://{ours}"))
            .await
            .unwrap();
        let req = proto::GetChunkRequest {
            segment_id: 1,
            index: 1,
            offset: 10,
            length: 1_400_000,
            target_osd: Some(ME),
        };
        let mut s = raw.get_chunk(req).await.unwrap().into_inner();
        match s.next().await.unwrap().unwrap().part {
            Some(proto::chunk_frame::Part::Header(h)) => {
                assert_eq!((h.segment_id, h.index, h.chunk_bytes), (1, 1, 1_500_000))
            }
            other => panic!("{other:?}"),
        }
        let mut got = Vec::new();
        while let Some(f) = s.next().await {
            match f.unwrap().part {
                Some(proto::chunk_frame::Part::Data(d)) => got.extend_from_slice(&d),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, &chunk1[10..1_400_010]);
        let mut s = raw
            .read_segment(proto::ReadSegmentRequest {
                layout: Some(api::layout_to_proto(&layout())),
                offset: 5,
                length: LEN - 5,
            })
            .await
            .unwrap()
            .into_inner();
        let mut assembly = api::ReadAssembly::new(5, LEN - 5);
        while let Some(f) = s.next().await {
            let f = f.unwrap();
            assembly.take(f.at, vec![f.data]).unwrap();
        }
        let got: Vec<u8> = assembly.finish().unwrap().concat();
        assert_eq!(got, &data[5..]);
        let e = raw
            .get_chunk(proto::GetChunkRequest {
                target_osd: Some(ME + 1),
                ..req
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");

        // Streamed writes: tonic's client into our service.
        let l2 = Layout {
            segment_id: 2,
            ..layout()
        };
        let head = proto::SegmentWrite {
            part: Some(proto::segment_write::Part::Layout(api::layout_to_proto(
                &l2,
            ))),
        };
        let frames: Vec<proto::SegmentWrite> = data
            .chunks(700_000)
            .map(|c| proto::SegmentWrite {
                part: Some(proto::segment_write::Part::Data(Bytes::copy_from_slice(c))),
            })
            .collect();
        let reply = raw
            .write_segment(tokio_stream::iter(
                std::iter::once(head).chain(frames.clone()),
            ))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(reply.version, 1);
        assert_eq!(osd.read(l2.clone(), 0, LEN).await.unwrap(), data);
        let e = raw
            .write_segment(tokio_stream::iter(frames))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("must start with the layout"), "{e:?}");

        // Our client against both servers.
        for (i, addr) in [&ours, &generated].into_iter().enumerate() {
            let l = Layout {
                segment_id: 3 + i as u64,
                ..layout()
            };
            let c = OsdClient::connect(addr, &Security::Insecure).unwrap();
            let ack = c.write_segment(&l, &data).await.unwrap();
            assert!(ack.stale.is_empty(), "{ack:?}");
            assert_eq!(osd.read(l.clone(), 0, LEN).await.unwrap(), data, "{addr}");
            let meta = crate::api::ChunkMeta {
                reserve_bytes: 0,
                scheme: Default::default(),
                segment_id: 10 + i as u64,
                index: 2,
                version: 1,
                chunk_bytes: 1_500_000,
                segment_length: LEN,
                applied: vec![1, 1],
            };
            let c = c.for_osd(ME);
            c.put_chunk(&meta, Bytes::copy_from_slice(chunk1))
                .await
                .unwrap();
            let (m, back) = c.get_chunk(meta.segment_id, 2, 0, 0, None).await.unwrap();
            assert_eq!((m, &back[..]), (meta.clone(), chunk1), "{addr}");
            let e = c
                .put_chunk(
                    &ChunkMeta {
                        chunk_bytes: 0,
                        ..meta
                    },
                    Bytes::new(),
                )
                .await
                .unwrap_err();
            assert!(matches!(e, OsdCallError::Invalid { .. }), "{addr}: {e:?}");
        }

        // Our client against both servers.
        for addr in [&ours, &generated] {
            let c = OsdClient::connect(addr, &Security::Insecure)
                .unwrap()
                .for_osd(ME);
            let (meta, frames) = c.get_chunk_frames(1, 1, 10, 1_400_000, None).await.unwrap();
            assert_eq!(meta.chunk_bytes, 1_500_000);
            let got: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
            assert_eq!(got, &chunk1[10..1_400_010], "{addr}");
            let frames = c
                .read_segment_frames_with(&layout(), 5, LEN - 5, |_| {})
                .await
                .unwrap();
            let got: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
            assert_eq!(got, &data[5..], "{addr}");
            let e = c.get_chunk_frames(9, 1, 0, 0, None).await.unwrap_err();
            assert!(matches!(e, OsdCallError::NotFound { .. }), "{e:?}");
            let e = OsdClient::connect(addr, &Security::Insecure)
                .unwrap()
                .for_osd(ME + 1)
                .get_chunk_frames(1, 1, 0, 0, None)
                .await
                .unwrap_err();
            assert!(matches!(e, OsdCallError::StaleLayout { .. }), "{e:?}");
        }
    }
}
