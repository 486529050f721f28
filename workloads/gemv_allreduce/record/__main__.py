from workloads.gemv_allreduce.record.record import main

raise SystemExit(main())
