"""Locust load generation against the HTTP front door (docs/loadgen.md).

Two halves that must not mix: the modules named `locust_*` (and `locustfile`) run inside
Locust's gevent process and import `locust`, which monkey-patches the standard library on
import; everything else here is plain Python shared with `dualpath load` / `dualpath run`
(options, arrival process, request bodies, SLO verdict, the Locust subprocess). Importing
this package never imports Locust.
"""
