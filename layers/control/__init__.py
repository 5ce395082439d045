"""The control state: backpressure, the archival switch (pause, share), archiver liveness, the
maintenance lock."""
