#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zrpc_client::fuzzing::etcd_values(data));
