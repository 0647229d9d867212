"""Running the job: its spec, the rank processes on this machine or over SSH, MLX's
environment contract, CPU ranks, and each rank's status and failure words."""
