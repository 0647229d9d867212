"""One Start: session, preflight, launcher and ranks, MLX's environment, telemetry."""
