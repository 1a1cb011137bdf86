//! Every connection that sent requests has a budget to show, whatever its
//! platform: Jira and Drive report no remaining budget in their headers,
//! yet the rows their requests spent are the connection's, so `/admin`
//! and `connection list` say what is known instead of "no request sent".

use cmcp_domain::RunTrigger;
use cmcp_fixtures::{DriveSimConfig, JiraSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_tests::{DRIVE_CONNECTION, DriveHarness};
use cmcp_worker::run_sync;

both_backends!(jira_and_drive_connections_have_the_budget_their_requests_spent);

pub async fn jira_and_drive_connections_have_the_budget_their_requests_spent(db: TestDb) {
    let (_jira, ctx) = cmcp_tests::jira(
        &db,
        "jira-acme",
        JiraSimConfig {
            projects: 5,
            ..JiraSimConfig::default()
        },
    )
    .await;
    let done = run_sync(&ctx, "jira-acme", RunTrigger::Test).await.unwrap();
    assert!(done.figures().unwrap().requests > 0);
    let store = db.store.clone();
    let h = DriveHarness::start(
        db,
        DriveSimConfig {
            drives: 2,
            folders_per_level: 2,
            depth: 1,
            ..DriveSimConfig::default()
        },
        1,
    )
    .await;
    let done = run_sync(&h.ctx, DRIVE_CONNECTION, RunTrigger::Test)
        .await
        .unwrap();
    assert!(done.figures().unwrap().requests > 0);
    let budgets = store.connection_budgets().await.unwrap();
    for id in ["jira-acme", DRIVE_CONNECTION] {
        assert!(
            budgets.iter().any(|(c, _)| c == id),
            "{id} has a budget: {budgets:#?}"
        );
    }
}
