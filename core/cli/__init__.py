"""The command-line front ends (macmesh demo / run / plan / nodes): argparse and printing only."""
