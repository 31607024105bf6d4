"""The emulated system both runtimes share: records, clocks, blocks, links, faults'
grammar, roofline, workload, settings, policies and engines. No I/O, no runtime imports."""
