-- Runs as the pool's own role: the application role may not create tenants.
INSERT INTO tenants (name) VALUES ($1) RETURNING id
