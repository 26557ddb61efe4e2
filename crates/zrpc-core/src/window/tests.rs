use super::*;
use proptest::prelude::*;

/// go-zero's test bucket duration.
const D: Duration = Duration::from_millis(50);

fn sums(w: &RollingWindow<SumBucket<f64>>, now: Instant) -> Vec<f64> {
    let mut v = Vec::new();
    w.reduce(now, |b| v.push(b.sum));
    v
}

// rollingwindow_test.go: TestRollingWindowAdd
#[test]
fn add_fills_buckets_oldest_to_newest() {
    let t0 = Instant::now();
    let mut r = RollingWindow::new(3, D);
    assert_eq!(sums(&r, t0), [0.0, 0.0, 0.0]);
    r.add(1.0, t0);
    assert_eq!(sums(&r, t0), [0.0, 0.0, 1.0]);
    let t = t0 + D;
    r.add(2.0, t);
    r.add(3.0, t);
    assert_eq!(sums(&r, t), [0.0, 1.0, 5.0]);
    let t = t0 + 2 * D;
    r.add(4.0, t);
    r.add(5.0, t);
    r.add(6.0, t);
    assert_eq!(sums(&r, t), [1.0, 5.0, 15.0]);
    let t = t0 + 3 * D;
    r.add(7.0, t);
    assert_eq!(sums(&r, t), [5.0, 15.0, 7.0]);
}

// rollingwindow_test.go: TestRollingWindowReset
#[test]
fn expired_buckets_leave_the_window() {
    let t0 = Instant::now();
    let mut r = RollingWindow::new(3, D).ignore_current(true);
    r.add(1.0, t0);
    assert_eq!(sums(&r, t0 + D), [0.0, 1.0]);
    assert_eq!(sums(&r, t0 + 2 * D), [1.0]);
    assert!(sums(&r, t0 + 3 * D).is_empty());
    // cross window
    r.add(1.0, t0 + 3 * D);
    assert!(sums(&r, t0 + 13 * D).is_empty());
}

// rollingwindow_test.go: TestRollingWindowReduce
#[test]
fn reduce_with_and_without_current_bucket() {
    for (ignore, expect) in [(false, 10.0), (true, 4.0)] {
        let t0 = Instant::now();
        let size = 4;
        let mut r: RollingWindow<SumBucket<f64>> =
            RollingWindow::new(size, D).ignore_current(ignore);
        let mut now = t0;
        for x in 0..size {
            for i in 0..=x {
                r.add(i as f64, now);
            }
            if x < size - 1 {
                now += D;
            }
        }
        let mut total = 0.0;
        r.reduce(now, |b| total += b.sum);
        assert_eq!(total, expect, "ignore_current = {ignore}");
    }
}

// rollingwindow_test.go: TestRollingWindowBucketTimeBoundary
#[test]
fn buckets_are_aligned_to_the_interval_grid() {
    let t0 = Instant::now();
    let mut r = RollingWindow::new(3, D);
    r.add(1.0, t0);
    r.add(2.0, t0 + D / 2);
    // 1.2 intervals after the start: the second bucket, not "one interval after the last add".
    r.add(3.0, t0 + D + D / 5);
    r.add(4.0, t0 + D + D * 4 / 5);
    assert_eq!(sums(&r, t0 + D + D * 4 / 5), [0.0, 3.0, 7.0]);
    r.add(5.0, t0 + 2 * D + D / 10);
    assert_eq!(sums(&r, t0 + 2 * D + D / 10), [3.0, 7.0, 5.0]);
}

#[test]
fn bucket_counts_and_reset() {
    let mut b = SumBucket::<i64>::default();
    b.add(3);
    b.add(4);
    assert_eq!((b.sum, b.count), (7, 2));
    b.reset();
    assert_eq!(b, SumBucket::default());
}

#[test]
fn earlier_instant_goes_to_current_bucket() {
    let t0 = Instant::now() + Duration::from_secs(10);
    let mut r = RollingWindow::new(3, D);
    r.add(1.0, t0);
    r.add(1.0, t0 - Duration::from_secs(1));
    assert_eq!(sums(&r, t0), [0.0, 0.0, 2.0]);
}

#[test]
#[should_panic(expected = "size")]
fn zero_size_panics() {
    let _ = RollingWindow::<SumBucket>::new(0, D);
}

#[derive(Debug, Clone)]
enum Op {
    Add(i64),
    Advance(u64),
    Reduce,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (-1000i64..1000).prop_map(Op::Add),
        3 => (0u64..400).prop_map(Op::Advance),
        2 => Just(Op::Reduce),
    ]
}

proptest! {
    /// The window sum equals a naive recount of the events whose bucket (on the grid anchored at the
    /// first add) is inside the window.
    #[test]
    fn sum_equals_naive_recount(
        ops in prop::collection::vec(op(), 1..300),
        size in 1usize..12,
        interval_ms in 1u64..120,
        ignore in any::<bool>(),
    ) {
        let interval = Duration::from_millis(interval_ms);
        let t0 = Instant::now();
        let mut now = t0;
        let mut w: RollingWindow<SumBucket<i64>> = RollingWindow::new(size, interval).ignore_current(ignore);
        let mut events: Vec<(Instant, i64)> = Vec::new();
        for op in ops {
            match op {
                Op::Add(v) => { w.add(v, now); events.push((now, v)); }
                Op::Advance(ms) => now += Duration::from_millis(ms),
                Op::Reduce => {}
            }
            let (mut sum, mut count, mut visited) = (0i64, 0u64, 0usize);
            w.reduce(now, |b| { sum += b.sum; count += b.count; visited += 1; });
            prop_assert!(visited <= size);
            let (mut want_sum, mut want_count) = (0i64, 0u64);
            if let Some(&(origin, _)) = events.first() {
                let idx = |t: Instant| (t.duration_since(origin).as_nanos() / interval.as_nanos()) as i128;
                let c = idx(now);
                let newest = if ignore { c - 1 } else { c };
                for &(t, v) in &events {
                    let i = idx(t);
                    if i > c - size as i128 && i <= newest {
                        want_sum += v;
                        want_count += 1;
                    }
                }
            }
            prop_assert_eq!(sum, want_sum);
            prop_assert_eq!(count, want_count);
        }
    }
}
