"""What a job measured: telemetry from the ranks' events, its series, link-test figures,
and the run history that keeps them."""
