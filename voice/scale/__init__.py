"""Scale-out on Ray Serve: N replicas of the whole voice stack (engine + ASR + TTS + calls)
behind one endpoint. `ray_serve` builds and runs the application, `router` places new requests
on the least-loaded replica, `metrics` labels every series with its replica and merges them into
one cluster view. Needs the optional `ray` extra; nothing else in diffvoice imports this package.
"""
