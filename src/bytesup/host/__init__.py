"""Facts and measurements of this machine: memory bandwidth and matrix speed (hostbench), and the host, code and
packages a run records (environment). Imports nothing of bytesup but paths."""
