-- Results and traces (010): a handler's return value is kept with its job (JSON, removed with
-- the job when it is pruned), and the trace context of the enqueue (a W3C traceparent, with
-- its tracestate) so that each attempt's span can link to the trace that asked for it.

ALTER TABLE jobledger_jobs ADD COLUMN result jsonb;
ALTER TABLE jobledger_jobs ADD COLUMN trace_context text;
