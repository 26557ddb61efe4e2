//! The client's compression, for every generated client on a [`Client`](crate::Client):
//! tonic's own compression is set per generated client (`send_compressed`/`accept_compressed`)
//! and its codec functions are private to tonic, so the client works on the messages' frames
//! (`zrpc_core::grpc::compression`) around tonic's codec:
//!
//! - requests are compressed with `Compression` (or the method's `MethodCompression`, or the
//!   call's [`CallCompression`]), messages below `CompressionMinSize` excepted, and sent with
//!   `grpc-encoding`; a request that already has one (tonic's `send_compressed`) is left alone;
//! - a call that uses compression (`Compression`, the method's `MethodCompression`, or a
//!   [`CallCompression`] in the request) lists the encodings the client can decompress in
//!   `grpc-accept-encoding`, so that a server set to compress its responses does; other calls
//!   send no such header (it would cost every call its encoding on the wire);
//! - a response with `grpc-encoding` is decompressed (each message bounded by
//!   `MaxDecompressedSize`: `ResourceExhausted` past it) and reaches tonic without the header,
//!   with a [`CallCompression`] in its extensions that tells how each message arrived; one in
//!   an encoding this build lacks fails with `Internal`, as the spec asks.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderValue;
use http_body_util::BodyExt;
use tonic::Status;
use tonic::body::Body;
use tower::BoxError;
use zrpc_core::grpc::compression::{
    CallCompression, Compress, Decompress, Encoding, Encodings, GRPC_ACCEPT_ENCODING, GRPC_ENCODING,
};

use zrpc_core::grpc::find_header;

use crate::conf::RpcClientConf;

/// The client's compression settings, shared by its clones.
#[derive(Debug)]
pub(crate) struct Compression {
    /// `Compression`.
    send: Option<Encoding>,
    /// `MethodCompression`, by full method.
    methods: HashMap<Box<str>, Option<Encoding>, foldhash::fast::RandomState>,
    /// Some `MethodCompression` entry names an encoding.
    method_encodings: bool,
    built: Encodings,
    /// `grpc-accept-encoding`, `None` when the build has no encoding.
    accept_value: Option<HeaderValue>,
    min_size: usize,
    limit: usize,
}

impl Compression {
    pub(crate) fn new(conf: &RpcClientConf) -> Arc<Self> {
        let built = Encodings::built();
        Arc::new(Compression {
            send: conf.compression,
            methods: conf
                .method_compression
                .iter()
                .map(|m| (m.full_method.as_str().into(), m.compression))
                .collect(),
            method_encodings: conf
                .method_compression
                .iter()
                .any(|m| m.compression.is_some()),
            built,
            accept_value: (!built.is_empty()).then(|| built.header_value()),
            min_size: conf.compression_min_size,
            limit: conf.max_decompressed_size,
        })
    }

    /// Sets up `req` as its call compresses (its headers, its body), and what its response
    /// needs.
    #[inline]
    pub(crate) fn request(&self, req: &mut http::Request<Body>) -> Inflate {
        let call = req.extensions().get::<CallCompression>().cloned();
        if call.is_none() && self.send.is_none() && !self.method_encodings {
            // a call without compression: nothing to add
            return Inflate {
                call,
                limit: self.limit,
            };
        }
        let choice = match call.as_ref().and_then(CallCompression::send_choice) {
            Some(choice) => choice,
            None if self.methods.is_empty() => self.send,
            None => self
                .methods
                .get(req.uri().path())
                .copied()
                .unwrap_or(self.send),
        };
        if let Some(encoding) = choice.filter(|e| self.built.contains(*e))
            && !req.headers().contains_key(&GRPC_ENCODING)
        {
            req.headers_mut()
                .insert(GRPC_ENCODING, encoding.header_value());
            let body = std::mem::take(req.body_mut());
            *req.body_mut() = Body::new(
                Compress::new(body, encoding)
                    .min_size(self.min_size)
                    .choices(call.clone()),
            );
        }
        // the call uses compression: it asks for compressed responses too
        if let Some(accept) = self
            .accept_value
            .as_ref()
            .filter(|_| call.is_some() || choice.is_some())
        {
            req.headers_mut()
                .entry(GRPC_ACCEPT_ENCODING)
                .or_insert_with(|| accept.clone());
        }
        Inflate {
            call,
            limit: self.limit,
        }
    }
}

/// What a call's response needs to be decompressed.
#[derive(Debug, Default)]
pub(crate) struct Inflate {
    call: Option<CallCompression>,
    limit: usize,
}

impl Inflate {
    /// The longest response message (`MaxDecompressedSize`).
    #[inline]
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The response, decompressed when it says it is compressed.
    #[inline]
    pub(crate) fn response(
        self,
        resp: http::Response<Body>,
    ) -> Result<http::Response<Body>, BoxError> {
        let Some(value) = find_header(resp.headers(), &GRPC_ENCODING) else {
            return Ok(resp);
        };
        if value.as_bytes() == b"identity" {
            return Ok(resp);
        }
        let built = Encodings::built();
        let Some(encoding) = Encoding::from_name(value.as_bytes()).filter(|e| built.contains(*e))
        else {
            return Err(Status::internal(format!(
                "the response is compressed with grpc-encoding {:?}, which this client does \
                 not support (grpc-accept-encoding: {})",
                String::from_utf8_lossy(value.as_bytes()),
                String::from_utf8_lossy(built.header_value().as_bytes()),
            ))
            .into());
        };
        let (mut parts, body) = resp.into_parts();
        parts.headers.remove(&GRPC_ENCODING);
        let call = self.call.unwrap_or_default();
        parts.extensions.insert(call.clone());
        let body = Decompress::new(body, encoding)
            .limit(self.limit)
            .record(Some(call))
            .map_err(|e| e.or_codec(|c| Status::new(c.code().into(), c.message())));
        Ok(http::Response::from_parts(parts, Body::new(body)))
    }
}
