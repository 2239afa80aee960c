INSERT INTO customers (tenant_id, email, full_name, phone, address, segment, country_code)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id
