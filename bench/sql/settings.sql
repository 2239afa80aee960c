-- The server settings a reader needs to interpret the figures.
SELECT current_setting('synchronous_commit'), current_setting('server_version'),
       current_setting('shared_buffers'), current_setting('wal_level')
