"""Everything that talks to or runs llama.cpp: the HTTP client and its typed responses, the recording and replay
transports, starting servers (the one engine choice), the embedded engine, the native build, RPC, where a
server runs, and timed requests. Imports models, host and the leaves below it."""
