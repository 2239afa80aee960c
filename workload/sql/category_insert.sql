INSERT INTO categories (tenant_id, name) VALUES ($1, $2) RETURNING id
