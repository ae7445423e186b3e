"""Batch jobs: work that can wait, embedded by the provider's Batch API at its batch price.

- ``records``: the batch jobs topic (compacted): a job's record written, a partition's jobs read;
- ``former`` and ``lane``: the processor's side: which records go to jobs, and the jobs they
  form, recorded before the records' input offsets are committed;
- ``watcher``: a member of the jobs' own group that submits each job, polls it and, when the
  provider ends it, has its outcomes written (``job_file``, ``job_outputs``, ``replay``) exactly
  as the sync path writes them (``writer``: the job's outputs, exactly-once in its transactions).
"""
