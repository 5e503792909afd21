"""Facts and measurements of this machine: memory bandwidth and matrix speed (hostbench), and the host, code and
packages a run records (environment), and where a lesson's wall time goes (spent). Imports nothing of bytesup but paths."""
