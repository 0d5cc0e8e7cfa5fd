#!/bin/bash
# Issue 2 (foundation) in one default guest: rrxe loaded, rrxe0 on veth0 (10.99.0.1/24).
. "$(dirname "$0")/lib.sh"

# --- the device through our provider
dv=$(ibv_devinfo -v -d rrxe0 2>&1)
check "devinfo_runs" test -n "$(echo "$dv" | grep 'hca_id:	rrxe0')"
check "port_active" grep -q "state:.*PORT_ACTIVE" <<<"$dv"
check "link_layer_ethernet" grep -q "link_layer:.*Ethernet" <<<"$dv"
check "max_mtu_4096" grep -q "max_mtu:.*4096" <<<"$dv"
check "active_mtu_1024_on_1500" grep -q "active_mtu:.*1024" <<<"$dv"
check "vendor_id_is_rrxe" grep -q "vendor_id:.*0x525258" <<<"$dv"
check "gid_roce_v2_for_ipv4" grep -qE "GID\[ *[0-9]+\]:.*::ffff:10.99.0.1, RoCE v2" <<<"$dv"
gid_idx=$(echo "$dv" | sed -nE 's/.*GID\[ *([0-9]+)\]:.*::ffff:10\.99\.0\.1, RoCE v2.*/\1/p' | head -1)
check "sysfs_gid_type_roce_v2" grep -q "RoCE v2" "/sys/class/infiniband/rrxe0/ports/1/gid_attrs/types/${gid_idx:-0}"
check "sysfs_gid_ndev_veth0" grep -qx veth0 "/sys/class/infiniband/rrxe0/ports/1/gid_attrs/ndevs/${gid_idx:-0}"
check "rdma_link_show_active" bash -c "rdma link show rrxe0/1 | grep -q 'state ACTIVE.*netdev veth0'"
check "sysfs_uabi_attr" grep -qx 2 /sys/class/infiniband/rrxe0/rrxe_uabi
# Only librrxe can claim rrxe0: without its .driver file the device has no provider.
check_fails "no_provider_no_device" "rrxe0|not found|No IB devices" \
  bash -c "mkdir -p /run/empty.d && mount --bind /run/empty.d /etc/libibverbs.d && ibv_devinfo -d rrxe0; rc=\$?; umount /etc/libibverbs.d; exit \$rc"
check "rdmav_drivers_loads_uninstalled" bash -c \
  "mount --bind /run/empty.d /etc/libibverbs.d; RDMAV_DRIVERS=$RRXE_ROOT/build/librrxe ibv_devinfo -d rrxe0 | grep -q PORT_ACTIVE; rc=\$?; umount /etc/libibverbs.d; exit \$rc"

# --- MTU follows the netdev
ip link set veth0 mtu 9000; ip link set veth1 mtu 9000
check "active_mtu_4096_on_9000" wait_for 5 bash -c '[ "$(active_mtu rrxe0)" = "4096" ]'
ip link set veth0 mtu 1500; ip link set veth1 mtu 1500
check "active_mtu_back_to_1024" wait_for 5 bash -c '[ "$(active_mtu rrxe0)" = "1024" ]'

# --- port state follows the link, with async events
ibv_asyncwatch -d rrxe0 > /tmp/async.log 2>&1 &
aw=$!
sleep 1
ip link set veth0 down
check "port_down_when_netdev_down" wait_for 5 bash -c '[ "$(port_state rrxe0)" = "PORT_DOWN" ]'
ip link set veth0 up
check "port_active_when_netdev_up" wait_for 5 bash -c '[ "$(port_state rrxe0)" = "PORT_ACTIVE" ]'
sleep 1; kill $aw 2>/dev/null; wait $aw 2>/dev/null
check "event_port_err" grep -q "PORT_ERR" /tmp/async.log
check "event_port_active" grep -q "PORT_ACTIVE" /tmp/async.log
# carrier loss on the peer also takes the port down
ip link set veth1 down
check "port_down_on_carrier_loss" wait_for 5 bash -c '[ "$(port_state rrxe0)" = "PORT_DOWN" ]'
ip link set veth1 up
check "port_active_on_carrier_back" wait_for 5 bash -c '[ "$(port_state rrxe0)" = "PORT_ACTIVE" ]'

# --- renaming keeps the provider match
rdma dev set rrxe0 name zz0
check "renamed_device_still_served" bash -c "ibv_devinfo -d zz0 | grep -q PORT_ACTIVE"
rdma dev set zz0 name rrxe0

# --- bad input
check_fails "second_device_same_netdev_eexist" "exists" rdma link add rrxe1 type rrxe netdev veth0
check_fails "missing_netdev_refused" "no such|not found|error" rdma link add rrxe1 type rrxe netdev nosuch0
check_fails "loopback_refused" "not supported|error" rdma link add rrxe1 type rrxe netdev lo
check_fails "rxe_name_refused" "invalid|error" rdma link add rxe9 type rrxe netdev veth1
check "no_device_left_by_refusals" bash -c "! ls /sys/class/infiniband | grep -qE 'rrxe1|rxe9'"

# --- rdma_rxe side by side, each served by its own provider
check "rdma_rxe_loaded_beside_rrxe" rxe_first
check "rxe0_added_on_veth1" rdma link add rxe0 type rxe netdev veth1
check "rxe0_served_by_librxe" bash -c "ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE"
check "rrxe0_still_served_by_librrxe" bash -c "ibv_devinfo -d rrxe0 | grep -q 'vendor_id:.*0x525258'"
check_fails "rrxe_refused_on_rxe_netdev" "exists" rdma link add rrxe1 type rrxe netdev veth1
check "rxe0_deleted" rdma link delete rxe0
# siw (iWARP, over TCP) may share a netdev with rrxe, as with rdma_rxe; rdma_rxe may not, even
# when siw is there too (a lookup of any driver's device can find siw first).
check "siw0_added_on_veth1" bash -c "modprobe siw && rdma link add siw0 type siw netdev veth1"
check "rrxe_beside_siw_on_one_netdev" rdma link add rrxe1 type rrxe netdev veth1
check "rrxe1_beside_siw_active" wait_for 10 bash -c '[ "$(port_state rrxe1)" = "PORT_ACTIVE" ]'
check "rrxe1_beside_siw_deleted" rdma link delete rrxe1
check "rxe0_added_beside_siw" rdma link add rxe0 type rxe netdev veth1
check_fails "rrxe_refused_on_rxe_and_siw_netdev" "exists" rdma link add rrxe1 type rrxe netdev veth1
check "rxe0_siw0_deleted" bash -c "rdma link delete rxe0 && rdma link delete siw0"

# --- rdma link delete, and the netdev going away
check "link_delete_removes_device" bash -c "rdma link delete rrxe0 && ! test -e /sys/class/infiniband/rrxe0"
check "link_add_again" rdma link add rrxe0 type rrxe netdev veth0
ip link add vethx0 type veth peer name vethx1; ip link set vethx0 up; ip link set vethx1 up
check "link_add_on_second_netdev" rdma link add rrxe2 type rrxe netdev vethx0
ip link del vethx0
check "netdev_delete_removes_device" wait_for 10 bash -c "! test -e /sys/class/infiniband/rrxe2"
check "other_device_untouched" bash -c "ibv_devinfo -d rrxe0 | grep -q PORT_ACTIVE"
summary
