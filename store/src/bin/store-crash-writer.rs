//! `store-crash-writer DIR`: writes to an embedded store in DIR from 32 tasks, prints every
//! acknowledged key as `ACK <key> <revision> END`, and aborts the process mid-stream (other
//! writes queued, a group commit possibly in flight). The crash test reopens DIR afterwards
//! and checks that every acknowledged write survived.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use meridian_store::{EmbeddedStore, Storage};

/// Acknowledged writes after which the process aborts.
const CRASH_AFTER: usize = 1500;

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: store-crash-writer DIR");
        std::process::exit(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("runtime: {e}");
            std::process::exit(1);
        }
    };
    runtime.block_on(async move {
        let store = match EmbeddedStore::open(&dir) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                eprintln!("opening {}: {e}", dir.to_string_lossy());
                std::process::exit(1);
            }
        };
        let acked = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..32)
            .map(|w| {
                let store = Arc::clone(&store);
                let acked = Arc::clone(&acked);
                tokio::spawn(async move {
                    for i in 0.. {
                        let key = format!("/crash/{w}/{i}");
                        let Ok(kv) = store.create(&key, Bytes::from(vec![1u8; 512])).await else {
                            std::process::exit(1);
                        };
                        // One println is one locked, flushed line; the END marker tells a whole
                        // line from one cut by the abort.
                        println!("ACK {key} {} END", kv.mod_revision);
                        if acked.fetch_add(1, Ordering::SeqCst) + 1 >= CRASH_AFTER {
                            std::process::abort();
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    });
}
