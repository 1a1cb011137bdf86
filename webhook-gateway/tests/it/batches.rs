//! The store's batch write of deliveries, which the gateway's writers
//! commit through, against a model of one delivery after the other. A
//! batch goes in as one statement for the deliveries that share no key and
//! no replay key and one statement each for the rest, on both backends;
//! whatever the mix, each outcome must be the one that delivery would have
//! had in a transaction of its own, in the batch's order. The batches are
//! drawn from a fixed seed, so a failure comes back on every run.

use std::collections::HashMap;

use cmcp_domain::Platform;
use cmcp_registry::testing::{TestDb, cipher, delivery, job_of_each_delivery};
use cmcp_registry::{Accepted, DeliveryStatus, NewDelivery, Premise, Recorded};

use crate::hooks::ready;

both_backends!(
    a_batch_has_the_outcomes_of_its_deliveries_one_after_the_other,
    a_writers_batch_that_meets_a_stored_key_is_written_again_then_the_next_ones_expect_copies,
);

/// xorshift64: the draws of this file, from a fixed seed.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One delivery after the other: what is stored under each delivery key
/// and each replay key.
#[derive(Default)]
struct Model {
    keys: HashMap<String, String>,
    replays: HashMap<String, String>,
    /// Each delivery stored `received`, with the job it was given.
    jobs: HashMap<String, String>,
}

impl Model {
    /// The outcome `d` must have after everything before it; `Stored`
    /// outcomes are taken from `got` (their ids are made by the store).
    fn next(&mut self, d: &NewDelivery, stale: bool, got: &Accepted) -> Accepted {
        if stale {
            return Accepted::Stale;
        }
        if let Some(id) = d.replay_key.as_ref().and_then(|r| self.replays.get(r)) {
            return Accepted::Recorded(Recorded::Replay { id: id.clone() });
        }
        if let Some(id) = self.keys.get(&d.delivery_key) {
            return Accepted::Recorded(Recorded::Duplicate { id: id.clone() });
        }
        let Accepted::Recorded(Recorded::Stored { id, job_id }) = got else {
            return Accepted::Recorded(Recorded::Stored {
                id: "(a new row)".into(),
                job_id: None,
            });
        };
        self.keys.insert(d.delivery_key.clone(), id.clone());
        if let Some(r) = &d.replay_key {
            self.replays.insert(r.clone(), id.clone());
        }
        let received = d.status == DeliveryStatus::Received;
        if let (true, Some(job)) = (received, job_id) {
            self.jobs.insert(id.clone(), job.clone());
        }
        Accepted::Recorded(Recorded::Stored {
            id: id.clone(),
            job_id: if received { job_id.clone() } else { None },
        })
    }
}

async fn a_batch_has_the_outcomes_of_its_deliveries_one_after_the_other(db: TestDb) {
    let s = &db.store;
    ready(&db).await;
    let secret = s
        .intake_state(&cipher(), "gh")
        .await
        .unwrap()
        .unwrap()
        .secrets[0]
        .id;
    let mut writer = s.delivery_writer();
    let mut draw = Draw(0x2545_f491_4f6c_dd1d);
    let mut model = Model::default();
    let (mut together, mut apart) = (0, 0);
    for round in 0..41 {
        // The last batch is larger than a SQLite statement takes (64
        // deliveries), mostly of new keys: it goes in several.
        let n = if round == 40 { 150 } else { 1 + draw.below(16) };
        let mut batch = Vec::with_capacity(n);
        for _ in 0..n {
            let status = [
                DeliveryStatus::Received,
                DeliveryStatus::Ignored,
                DeliveryStatus::Failed,
            ][draw.below(3)];
            let premise = match draw.below(6) {
                0 => None,
                // A secret that is not the connection's: the premise fails.
                1 => Some(Premise {
                    secret_id: Some(secret + 1_000),
                }),
                _ => Some(Premise {
                    secret_id: Some(secret),
                }),
            };
            let replay = (draw.below(2) == 0).then(|| draw.below(4 + round * 4 + n * 4));
            let d = NewDelivery {
                connection_id: "gh".into(),
                platform: Platform::Github,
                delivery_key: format!("key-{}", draw.below(4 + round * 8 + n * 8)),
                event: "repository.renamed".into(),
                headers: vec![("x-github-event".into(), "repository".into())],
                body: format!("{{\"round\":{round}}}").into_bytes(),
                verification: "hmac-sha256".into(),
                status,
                error: None,
                replay_key: replay.map(|r| format!("replay-{r}")),
            };
            batch.push((d, premise));
        }
        let items: Vec<(&NewDelivery, Option<Premise>)> =
            batch.iter().map(|(d, p)| (d, *p)).collect();
        // Half through the store's transaction, half through a gateway's
        // writer (on PostgreSQL its own connection, one statement when the
        // whole batch is independent).
        let got = if round % 2 == 0 {
            s.record_deliveries(&items).await.unwrap()
        } else {
            writer.record(&items).await.unwrap()
        };
        assert_eq!(got.len(), n);
        // Which deliveries share a key or a replay key with another of the
        // batch: those go in apart.
        let mut shared = HashMap::new();
        for (d, _) in &batch {
            *shared.entry(("key", &d.delivery_key)).or_insert(0) += 1;
            if let Some(r) = &d.replay_key {
                *shared.entry(("replay", r)).or_insert(0) += 1;
            }
        }
        for ((d, premise), got) in batch.iter().zip(&got) {
            let stale = premise.is_some_and(|p| p.secret_id != Some(secret));
            let want = model.next(d, stale, got);
            assert_eq!(got, &want, "round {round}, {:?}", d.delivery_key);
            let alone = shared[&("key", &d.delivery_key)] == 1
                && d.replay_key
                    .as_ref()
                    .is_none_or(|r| shared[&("replay", r)] == 1);
            if alone {
                together += 1;
            } else {
                apart += 1;
            }
        }
    }
    // Both groups were drawn many times, so both statements ran.
    assert!(
        together > 100 && apart > 40,
        "{together} together, {apart} apart"
    );
    let stored = s.list_deliveries("gh").await.unwrap();
    assert_eq!(stored.len(), model.keys.len());
    // Every delivery stored `received` is named by exactly one job, the
    // one its outcome gave; the deliveries a batch statement stored share
    // theirs.
    let named = job_of_each_delivery(s).await;
    assert_eq!(named, model.jobs, "each received delivery, in its job");
    let jobs = s.delivery_jobs().await.unwrap().len();
    assert!(
        jobs * 2 < model.jobs.len(),
        "{jobs} jobs for {} deliveries: the batches share theirs",
        model.jobs.len()
    );
}

/// On PostgreSQL a writer's first try at a batch of independent
/// deliveries has no clause for a key already stored: a batch that meets
/// one fails whole, writes nothing, and is written again with the clause,
/// so its outcomes are those of the store (the new delivery stored, in a
/// job of its own naming only it; the copy a duplicate). For the next
/// `STORED_COPIES_WARY_FOR` the writer writes with the clause from the
/// start, so a second batch with a copy is written once. SQLite writes
/// every batch once.
async fn a_writers_batch_that_meets_a_stored_key_is_written_again_then_the_next_ones_expect_copies(
    db: TestDb,
) {
    let s = &db.store;
    ready(&db).await;
    let mut writer = s.delivery_writer();
    let stored_id = |a: &Accepted| match a {
        Accepted::Recorded(Recorded::Stored { id, job_id }) => (id.clone(), job_id.clone()),
        other => panic!("not stored: {other:?}"),
    };
    // The writer's outcomes for a batch of new (received) deliveries keyed so.
    let record = async |writer: &mut cmcp_registry::DeliveryWriter, keys: &[&str]| {
        let batch: Vec<_> = keys
            .iter()
            .map(|k| delivery(k, DeliveryStatus::Received))
            .collect();
        let items: Vec<_> = batch.iter().map(|d| (d, None)).collect();
        writer.record(&items).await.unwrap()
    };
    let out = record(&mut writer, &["first"]).await;
    let (first_id, _) = stored_id(&out[0]);
    assert_eq!(writer.written_again(), 0, "nothing stored to meet");

    let out = record(&mut writer, &["second", "first"]).await;
    let (second_id, second_job) = stored_id(&out[0]);
    assert_eq!(
        out[1],
        Accepted::Recorded(Recorded::Duplicate {
            id: first_id.clone()
        })
    );
    let postgres = matches!(s, cmcp_registry::Store::Postgres(_));
    assert_eq!(writer.written_again(), u64::from(postgres));
    let jobs = s.delivery_jobs().await.unwrap();
    let named: Vec<&[String]> = jobs
        .iter()
        .filter(|(id, _)| Some(id) == second_job.as_ref())
        .map(|(_, job)| job.ids())
        .collect();
    assert_eq!(named, [[second_id.clone()].as_slice()], "{jobs:?}");

    let out = record(&mut writer, &["third", "second"]).await;
    stored_id(&out[0]);
    assert_eq!(
        out[1],
        Accepted::Recorded(Recorded::Duplicate { id: second_id })
    );
    assert_eq!(
        writer.written_again(),
        u64::from(postgres),
        "written with the clause from the start"
    );
    assert_eq!(s.list_deliveries("gh").await.unwrap().len(), 3);
}
