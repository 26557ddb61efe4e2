//! What the server's and the client's metrics share (each crate defines its families;
//! go-zero's names, labels and buckets are the contract, see `docs/metrics.md`).

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};

/// go-zero's duration buckets, in milliseconds.
pub const DURATION_BUCKETS_MS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0,
];

/// Gauges read from live state when Prometheus scrapes (nothing is updated per call): the
/// one skeleton of zrpc's scrape-time gauges (breakers, shedder, concurrency limits, client
/// endpoints). Each scrape resets the vectors and `fill` sets them from `state`; one scrape at a
/// time, as two at once (Prometheus and a person's curl) would see each other's emptied
/// vectors.
pub struct ScrapedGauges<S> {
    state: S,
    gauges: Arc<[GaugeVec]>,
    fill: fn(&S, &[GaugeVec]),
    scrape: Arc<Mutex<()>>,
}

impl<S: Clone> Clone for ScrapedGauges<S> {
    fn clone(&self) -> Self {
        ScrapedGauges {
            state: self.state.clone(),
            gauges: Arc::clone(&self.gauges),
            fill: self.fill,
            scrape: Arc::clone(&self.scrape),
        }
    }
}

impl<S> std::fmt::Debug for ScrapedGauges<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self
            .gauges
            .iter()
            .flat_map(|g| g.desc().into_iter().map(|d| d.fq_name.clone()))
            .collect();
        f.debug_struct("ScrapedGauges")
            .field("gauges", &names)
            .finish_non_exhaustive()
    }
}

impl<S> ScrapedGauges<S> {
    /// One gauge vector per `(name, help, labels)` of `gauges`, each with the constant labels
    /// `constant`; `None` when a name or label is not valid Prometheus.
    pub fn new(
        state: S,
        constant: &[(&str, &str)],
        gauges: &[(&str, &str, &[&str])],
        fill: fn(&S, &[GaugeVec]),
    ) -> Option<Self> {
        let gauges = gauges
            .iter()
            .map(|(name, help, labels)| {
                let opts = constant
                    .iter()
                    .fold(Opts::new(*name, *help), |o, (k, v)| o.const_label(*k, *v));
                GaugeVec::new(opts, labels).ok()
            })
            .collect::<Option<Vec<_>>>()?;
        Some(ScrapedGauges {
            state,
            gauges: gauges.into(),
            fill,
            scrape: Arc::default(),
        })
    }
}

impl<S: Send + Sync> Collector for ScrapedGauges<S> {
    fn desc(&self) -> Vec<&Desc> {
        self.gauges.iter().flat_map(Collector::desc).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _one_scrape = self.scrape.lock();
        for g in self.gauges.iter() {
            g.reset();
        }
        (self.fill)(&self.state, &self.gauges);
        self.gauges.iter().flat_map(Collector::collect).collect()
    }
}
