//! etcd registration (issue 4): the server's key in go-zero's layout heals itself.

use std::time::Duration;

use zrpc_tests::etcd::{EtcdServer, keys_under, unique_key};

#[tokio::test]
async fn harness_restarts_etcd_on_same_data_dir() {
    let mut etcd = EtcdServer::start().await;
    if etcd.skip_if_external("harness_restarts_etcd_on_same_data_dir") {
        return;
    }
    let key = unique_key("harness");
    let mut c = etcd.client().await;
    c.put(format!("{key}/1"), "v", None).await.expect("put");
    etcd.kill();
    assert!(!etcd.is_running());
    etcd.restart().await;
    let mut c = etcd.client().await;
    let kvs = keys_under(&mut c, &key).await;
    assert_eq!(kvs, vec![(format!("{key}/1"), "v".to_owned())]);
    let _ = Duration::ZERO;
}
