"""Runtime layer: the process's MindSpore state (mode, device, seeds, threads, the parallel
context, this worker's rank) and the CPU instruction-set choice made before MindSpore loads."""
