#!/bin/bash
# Reference solution: group by customer id, filter by status and a half-open date range.
set -euo pipefail
cat > /app/top_customers.sql <<'SQL'
SELECT c.name AS name,
       c.country AS country,
       printf('%.2f', SUM(i.qty * i.unit_price_cents) / 100.0) AS total
FROM customers AS c
JOIN orders AS o ON o.customer_id = c.id
JOIN order_items AS i ON i.order_id = o.id
WHERE o.status = 'paid'
  AND o.ordered_at >= '2023-01-01 00:00:00'
  AND o.ordered_at < '2024-01-01 00:00:00'
GROUP BY c.id
ORDER BY SUM(i.qty * i.unit_price_cents) DESC, c.name ASC
LIMIT 5;
SQL
sqlite3 -header -csv /app/shop.db < /app/top_customers.sql > /app/top_customers.csv
