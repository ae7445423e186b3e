"""The composition roots, one module a part: a processor (`processor`, its `service`), its
watch of a store's generations (`store_watch`) and batch jobs (`batch_jobs`), the store writer
(`store_writer`), `embedstream serve` (`gateway`), `embedstream migrate` (`migrate`), and the
supervisor of one host's lane processes (`host`). Each builds its part from the layers below
and hands it over ready-made; nothing below imports them."""
