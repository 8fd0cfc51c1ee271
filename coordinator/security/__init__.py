"""Authentication: listeners and their security protocols (listeners.py), TLS (tls.py),
SASL mechanisms (plain.py, scram.py) and the SCRAM credential store (credentials.py).

Pure where it can be: nothing here imports the server, the runtime or the config module;
the connection's SASL state machine lives in server/sasl_auth.py."""
